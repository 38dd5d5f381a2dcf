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

// Serving's decode step through fwd_kvcache: a few new queries per sequence against a long KV
// cache, memory-bound (read GB/s, not TFLOP/s). Cache layouts: dense, and paged with pages of 16
// keys (vLLM's default) and 256 keys (the block size FlashAttention-2's paged kernels take).
//   sweep     GQA 32/8 (Llama-3-8B), seqlen_q 1, no append, every layout, over every batch and
//             cache length of DecodeSizes
//   variants  one axis at a time from the sweep's setting, every layout, at the variant points:
//             64/8 heads (Llama-3-70B); MHA 32/32; append; seqlen_q 4 (speculative decoding)
//             without and with append
// Shapes whose K+V exceed the memory budget are left out. d = 128 throughout. Causal is on, as
// serving calls it: seqlen_q 4 needs it, and one query row sees every key either way.
struct DecodeSizes {
  std::vector<int64_t> batches, cache_lengths;            // the sweep
  std::vector<int64_t> variant_batches, variant_lengths;  // the variant points
  int64_t max_key_heads = 0;  // batch * seqlen_k * heads_k at most: the K+V memory budget
};

// GPU: batch 1/8/32/128 x cache 1k..128k keys, variants at FlashAttention-3's decode benchmark
// points (batch 1/8/32 x 8k/32k/128k), budget batch*seqlen_k <= 32*32768 at 8 KV heads as in
// ../shared/tools/fa3_bench.py (4 GiB of bf16 K+V; counted in key-heads so that MHA gets the
// same bytes). CPU: the same structure, small enough for a laptop-class CPU.
DecodeSizes decode_sizes(Machine machine) {
  if (machine == Machine::Gpu)
    return {{1, 8, 32, 128},
            {1024, 4096, 8192, 16384, 32768, 65536, 131072},
            {1, 8, 32},
            {8192, 32768, 131072},
            int64_t(32) * 32768 * 8};
  return {{1, 4}, {1024, 4096, 16384}, {1, 4}, {4096, 16384}, int64_t(4) * 4096 * 8};
}

// The heads, queries and append setting of one part of the decode grid.
struct DecodeStep {
  int64_t heads_q, heads_k, seqlen_q;
  bool append;
};

std::vector<Case> decode_grid(const GridFilter& filter, Machine machine) {
  const DecodeSizes sizes = decode_sizes(machine);
  GridFilter narrowed = filter;
  if (!narrowed.causal) narrowed.causal = true;
  narrowed.direction = Direction::Fwd;  // fwd_kvcache has no backward
  std::vector<Case> cases;
  auto add = [&](const DecodeStep& step, int64_t batch, int64_t cache_length) {
    if (batch * cache_length * step.heads_k > sizes.max_key_heads) return;
    for (int64_t page_size : {0, 16, 256}) {
      Shape s;
      s.batch = batch;
      s.seqlen_q = step.seqlen_q;
      s.seqlen_k = cache_length;
      s.heads_q = step.heads_q;
      s.heads_k = step.heads_k;
      s.head_dim = 128;
      s.kvcache = KvCache{page_size, step.append};
      append_cases(cases, s, narrowed, {Direction::Fwd});
    }
  };
  for (int64_t batch : sizes.batches)
    for (int64_t cache_length : sizes.cache_lengths) add({32, 8, 1, false}, batch, cache_length);
  const DecodeStep variants[] = {
      {64, 8, 1, false}, {32, 32, 1, false}, {32, 8, 1, true}, {32, 8, 4, false}, {32, 8, 4, true}};
  for (const DecodeStep& step : variants)
    for (int64_t batch : sizes.variant_batches)
      for (int64_t cache_length : sizes.variant_lengths) add(step, batch, cache_length);
  return cases;
}

}  // namespace

const std::vector<std::string>& grid_names() {
  static const std::vector<std::string> names{"small", "peers", "decode"};
  return names;
}

std::optional<std::vector<Case>> named_grid(const std::string& name, const GridFilter& filter,
                                            Machine machine) {
  if (name == "small") return small_grid(filter);
  if (name == "peers") return peers_grid(filter);
  if (name == "decode") return decode_grid(filter, machine);
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
  // that (a fraction of a percent in the decode grid) and are left out, so GB/s reads as cache
  // bandwidth, counted as FlashAttention-3's decode benchmark counts it.
  if (s.kvcache) return 2.0 * double(s.batch) * double(s.seqlen_k) * double(s.heads_k) * double(s.head_dim) * e;
  const double q = double(s.batch * s.seqlen_q * s.heads_q * s.head_dim) * e;
  const double kv = double(s.batch * s.seqlen_k * s.heads_k * s.head_dim) * e;  // k or v
  const double lse = double(s.batch * s.heads_q * s.seqlen_q) * 4.0;
  if (direction == Direction::Fwd) return q + 2 * kv + q + lse;  // q, k, v in; out, lse out
  // q, k, v, out, dout, lse in; dq, dk, dv out
  return 2 * q + 2 * kv + q + lse + q + 2 * kv;
}

}  // namespace flashattn::bench
