#include "grid.h"

#include <algorithm>
#include <sstream>

namespace flashattn::bench {

const char* direction_name(Direction direction) { return direction == Direction::Fwd ? "fwd" : "bwd"; }

namespace {

std::vector<bool> causal_settings(const GridFilter& filter) {
  if (filter.causal) return {*filter.causal};
  return {false, true};
}

std::vector<Direction> directions(const GridFilter& filter, std::vector<Direction> grid_default) {
  if (filter.direction) return {*filter.direction};
  return grid_default;
}

void append_cases(std::vector<Case>& cases, Shape shape, const GridFilter& filter,
                  const std::vector<Direction>& grid_directions) {
  for (bool causal : causal_settings(filter)) {
    shape.causal = causal;
    for (Direction direction : directions(filter, grid_directions)) cases.push_back({shape, direction});
  }
}

// Sized for a laptop-class CPU: the whole grid (with the naive reference beside each forward)
// finishes in about a minute on 2 cores. Tokens per head stay constant (batch * seqlen = 2048),
// so the cost grows only linearly with seqlen and the quadratic term shows in the naive column.
std::vector<Case> small_grid(const GridFilter& filter) {
  std::vector<Case> cases;
  for (int64_t head_dim : {64, 128})
    for (int64_t seqlen : {256, 512, 1024, 2048}) {
      Shape s;
      s.batch = 2048 / seqlen;
      s.seqlen_q = s.seqlen_k = seqlen;
      s.heads_q = s.heads_k = 2;
      s.head_dim = head_dim;
      append_cases(cases, s, filter, {Direction::Fwd, Direction::Bwd});
    }
  return cases;
}

// The grid of /work/shared/PEERS.md (the published FlashAttention benchmark): 16k tokens per
// batch and a model width of 2048.
std::vector<Case> peers_grid(const GridFilter& filter) {
  std::vector<Case> cases;
  for (int64_t head_dim : {64, 128, 256})
    for (int64_t seqlen : {512, 1024, 2048, 4096, 8192, 16384}) {
      Shape s;
      s.batch = 16384 / seqlen;
      s.seqlen_q = s.seqlen_k = seqlen;
      s.heads_q = s.heads_k = 2048 / head_dim;
      s.head_dim = head_dim;
      append_cases(cases, s, filter, {Direction::Fwd, Direction::Bwd});
    }
  return cases;
}

// Token generation: one new query per sequence against a long cache, grouped-query heads
// (32 query heads over 8 KV heads, as in Llama-3-8B). Memory-bound: read GB/s, not TFLOP/s.
// A single query row sees every key with or without the (bottom-right) causal mask, so the
// grid runs causal off only unless asked.
std::vector<Case> decode_grid(const GridFilter& filter) {
  std::vector<Case> cases;
  GridFilter narrowed = filter;
  if (!narrowed.causal) narrowed.causal = false;
  for (int64_t batch : {1, 8})
    for (int64_t seqlen_k : {1024, 4096, 16384, 65536}) {
      Shape s;
      s.batch = batch;
      s.seqlen_q = 1;
      s.seqlen_k = seqlen_k;
      s.heads_q = 32;
      s.heads_k = 8;
      s.head_dim = 128;
      append_cases(cases, s, narrowed, {Direction::Fwd});
    }
  return cases;
}

}  // namespace

const std::vector<std::string>& grid_names() {
  static const std::vector<std::string> names{"small", "peers", "decode"};
  return names;
}

std::optional<std::vector<Case>> named_grid(const std::string& name, const GridFilter& filter) {
  if (name == "small") return small_grid(filter);
  if (name == "peers") return peers_grid(filter);
  if (name == "decode") return decode_grid(filter);
  return std::nullopt;
}

std::vector<Case> single_shape_cases(Shape shape, const GridFilter& filter) {
  std::vector<Case> cases;
  if (shape.kvcache)
    append_cases(cases, shape, filter, {Direction::Fwd});
  else
    append_cases(cases, shape, filter, {Direction::Fwd, Direction::Bwd});
  return cases;
}

std::string describe_case(const Case& c) {
  const Shape& s = c.shape;
  std::ostringstream out;
  out << direction_name(c.direction) << " b=" << s.batch << " sq=" << s.seqlen_q << " sk=" << s.seqlen_k
      << " hq=" << s.heads_q << " hk=" << s.heads_k << " d=" << s.head_dim << " causal=" << int(s.causal);
  if (s.kvcache) out << " kvcache page=" << s.kvcache->page_size << " append=" << int(s.kvcache->append);
  return out.str();
}

std::optional<Shape> parse_shape(const std::string& text, std::string* error) {
  std::vector<int64_t> fields;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long long value = std::stoll(item, &used);
      if (used != item.size() || value <= 0) throw std::invalid_argument(item);
      fields.push_back(value);
    } catch (const std::exception&) {
      *error = "--shape: '" + item + "' is not a positive integer";
      return std::nullopt;
    }
  }
  if (fields.size() != 5 && fields.size() != 6) {
    *error = "--shape wants b,sq,sk,h,d or b,sq,sk,h,d,hk (got '" + text + "')";
    return std::nullopt;
  }
  Shape s;
  s.batch = fields[0];
  s.seqlen_q = fields[1];
  s.seqlen_k = fields[2];
  s.heads_q = fields[3];
  s.head_dim = fields[4];
  s.heads_k = fields.size() == 6 ? fields[5] : s.heads_q;
  return s;
}

namespace {

// Query-key pairs the mask leaves visible in a kvcache case: every key for every row, or with
// the bottom-right causal mask, row i sees the keys up to i + seqlen_k - seqlen_q.
double visible_pairs(const Shape& s) {
  if (!s.causal) return double(s.seqlen_q) * double(s.seqlen_k);
  double pairs = 0;
  for (int64_t i = 0; i < s.seqlen_q; ++i)
    pairs += double(std::clamp<int64_t>(i + s.seqlen_k - s.seqlen_q + 1, 0, s.seqlen_k));
  return pairs;
}

}  // namespace

double flops(const Shape& s, Direction direction) {
  if (s.kvcache) return 4.0 * double(s.batch) * double(s.heads_q) * double(s.head_dim) * visible_pairs(s);
  double f = 4.0 * double(s.batch) * double(s.heads_q) * double(s.seqlen_q) * double(s.seqlen_k) *
             double(s.head_dim);
  if (s.causal) f *= 0.5;
  return direction == Direction::Fwd ? f : 2.5 * f;
}

double min_bytes(const Shape& s, Direction direction, std::size_t element_bytes) {
  const double e = double(element_bytes);
  // A decode step's cost is reading the cache: 2 * b * seqlen_k * heads_k * d elements. q, out,
  // lse, the appended keys and the block table add about seqlen_q*heads_q / (seqlen_k*heads_k) of
  // that (under 0.5 % in the decode grid) and are left out, so GB/s reads as cache bandwidth,
  // counted as FlashAttention-3's decode benchmark counts it.
  if (s.kvcache) return 2.0 * double(s.batch) * double(s.seqlen_k) * double(s.heads_k) * double(s.head_dim) * e;
  const double q = double(s.batch * s.seqlen_q * s.heads_q * s.head_dim) * e;
  const double kv = double(s.batch * s.seqlen_k * s.heads_k * s.head_dim) * e;  // k or v
  const double lse = double(s.batch * s.heads_q * s.seqlen_q) * 4.0;
  if (direction == Direction::Fwd) return q + 2 * kv + q + lse;  // q, k, v in; out, lse out
  // q, k, v, out, dout, lse in; dq, dk, dv out
  return 2 * q + 2 * kv + q + lse + q + 2 * kv;
}

}  // namespace flashattn::bench
