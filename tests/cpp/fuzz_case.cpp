#include "fuzz_case.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <cstdio>
#include <sstream>
#include <vector>

namespace flashattn::test {
namespace {

class Draw {
 public:
  explicit Draw(std::mt19937_64& rng) : rng_(rng) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  float real(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  float log_uniform(float lo, float hi) { return std::exp(real(std::log(lo), std::log(hi))); }
  template <typename T>
  T pick(std::initializer_list<T> values) {
    return *(values.begin() + uniform(0, int(values.size()) - 1));
  }

  // Sequence lengths: 0 and 1 often, small ragged ones mostly, a few past 128 (several key tiles).
  int length() {
    const int kind = uniform(0, 99);
    if (kind < 6) return 0;
    if (kind < 18) return 1;
    if (kind < 60) return uniform(2, 17);
    if (kind < 92) return uniform(18, 80);
    return uniform(81, 200);
  }
  int head_dim() { return 8 * uniform(1, 32); }
  // -1 (unbounded), 0, small, or huge (past any sequence, near INT32_MAX).
  int window() {
    const int kind = uniform(0, 9);
    if (kind < 3) return -1;
    if (kind < 4) return 0;
    if (kind < 8) return uniform(1, 40);
    return pick<int>({100000, 1 << 30, INT_MAX - 1, INT_MAX});
  }
  float softcap() { return log_uniform(0.05f, 60.f); }
  std::optional<float> softmax_scale() {
    switch (uniform(0, 5)) {
      case 0: return 0.f;
      case 1: return -log_uniform(0.01f, 2.f);
      case 2: return log_uniform(1.f, 8.f);
      default: return log_uniform(0.01f, 1.f);
    }
  }
  DType dtype(bool float32) {
    const int kind = uniform(0, float32 ? 2 : 1);
    return kind == 0 ? DType::F16 : kind == 1 ? DType::BF16 : DType::F32;
  }

 private:
  std::mt19937_64& rng_;
};

int64_t max_of(const std::vector<int>& v) {
  int m = 0;
  for (int x : v) m = std::max(m, x);
  return m;
}

// Halves lengths (and then heads) until the case fits the budget.
void fit_attention(AttentionCase& c, int64_t budget) {
  auto work = [&] {
    const int64_t sq = c.varlen() ? max_of(c.varlen_q) : c.seqlen_q;
    const int64_t sk = c.varlen() ? max_of(c.varlen_k) : c.seqlen_k;
    const int64_t batch = c.varlen() ? int64_t(c.varlen_q.size()) : c.batch;
    return batch * c.heads_q * sq * sk * (c.head_dim + c.dv());
  };
  while (work() > budget) {
    if (c.heads_q > 4 && c.heads_q > c.heads_k) {  // a smaller GQA group first
      c.heads_q = c.heads_k * std::max(1, c.heads_q / c.heads_k / 2);
      continue;
    }
    for (int* len : {&c.seqlen_q, &c.seqlen_k}) *len = (*len + 1) / 2;
    for (auto* lens : {&c.varlen_q, &c.varlen_k})
      for (int& len : *lens) len = (len + 1) / 2;
    for (size_t b = 0; b < c.seqused_k.size(); ++b)
      c.seqused_k[b] = std::min(c.seqused_k[b], c.varlen() ? c.varlen_k[b] : c.seqlen_k);
  }
}

}  // namespace

AttentionCase draw_attention_case(std::mt19937_64& rng, const FuzzScope& scope) {
  Draw d(rng);
  AttentionCase c;
  c.dtype = d.dtype(scope.float32);
  c.heads_k = d.uniform(1, 4);
  c.heads_q = c.heads_k * d.pick({1, 1, 2, 3, 4, 8});
  c.head_dim = d.head_dim();
  if (d.coin(0.4)) c.head_dim_v = d.head_dim();
  const int layout = d.uniform(0, 99);
  if (layout < 60) {  // dense
    c.batch = d.coin(0.05) ? 0 : d.uniform(1, 3);
    c.seqlen_q = d.length();
    c.seqlen_k = d.length();
  } else if (layout < 97) {  // varlen
    const int batch = d.uniform(1, 4);
    for (int b = 0; b < batch; ++b) {
      c.varlen_q.push_back(d.length());
      c.varlen_k.push_back(d.length());
    }
  } else {  // varlen without sequences
    c.varlen_layout = true;
    c.batch = 0;
  }
  const int batch = c.varlen() ? int(c.varlen_q.size()) : c.batch;
  if (d.coin(0.15)) {
    for (int b = 0; b < batch; ++b) c.seqused_k.push_back(d.uniform(0, c.varlen() ? c.varlen_k[size_t(b)] : c.seqlen_k));
    c.tight_max_seqlen_k = d.coin(0.5);
  }
  c.causal = d.coin(0.3);
  if (d.coin(0.3)) {
    c.window_left = d.window();
    c.window_right = d.window();
  }
  if (d.coin(0.15)) c.softcap = d.softcap();
  if (d.coin(0.15)) c.alibi = d.uniform(1, 2);
  if (d.coin(0.15)) c.dropout_p = d.pick({0.01f, 0.1f, 0.5f, 0.9f, d.real(0.f, 0.95f)});
  if (d.coin(0.25)) c.num_splits = d.pick({0, 2, 3, 5, 16, 256});
  if (d.coin(0.25)) c.softmax_scale = d.softmax_scale();
  c.seed = rng();
  fit_attention(c, scope.work_budget);
  return c;
}

KvCase draw_kv_case(std::mt19937_64& rng, const FuzzScope& scope) {
  Draw d(rng);
  KvCase c;
  c.dtype = d.dtype(scope.float32);
  c.batch = d.coin(0.05) ? 0 : d.uniform(1, 4);
  c.heads_k = d.uniform(1, 4);
  c.heads_q = c.heads_k * d.pick({1, 1, 2, 4, 8});
  c.head_dim = d.head_dim();
  if (d.coin(0.3)) c.head_dim_v = d.head_dim();
  c.capacity = d.uniform(1, 160);
  c.seqlen_q = d.pick({0, 1, 1, 1, 2, 3, 5, 8, 16});
  c.full_cache = d.coin(0.15);
  if (!c.full_cache && d.coin(0.6)) c.seqlen_new = d.uniform(1, std::min(c.capacity, 9));
  const int storage = d.uniform(0, 2);
  if (storage == 1) {
    c.page_size = d.pick({1, 2, 3, 7, 16, 64, 256, d.uniform(1, c.capacity + 5)});
    c.unused_pages = d.coin(0.4);
  } else if (storage == 2) {
    c.batch_idx = true;
  }
  if (d.coin(0.4)) {
    c.rotary_dim = 2 * d.uniform(1, c.head_dim / 2);
    c.interleaved = d.coin(0.5);
  }
  c.causal = d.coin(0.4);
  if (d.coin(0.25)) {
    c.window_left = d.window();
    c.window_right = d.window();
  }
  c.num_splits = d.pick({0, 0, 1, 2, 3, 7, 64});
  if (d.coin(0.15)) c.softcap = d.softcap();
  if (d.coin(0.15)) c.alibi = d.uniform(1, 2);
  if (d.coin(0.2)) c.softmax_scale = d.softmax_scale();
  c.seed = rng();
  auto work = [&] { return int64_t(c.batch) * c.heads_q * std::max(c.seqlen_q, 1) * (c.capacity + 8) * (c.head_dim + c.dv()); };
  while (work() > scope.work_budget && c.capacity > c.seqlen_new + 1) c.capacity = std::max(c.seqlen_new + 1, c.capacity / 2);
  return c;
}

CombineCase draw_combine_case(std::mt19937_64& rng, const FuzzScope&) {
  Draw d(rng);
  CombineCase c;
  c.splits = d.pick({1, 2, 3, 5, 8, d.uniform(1, 40)});
  c.varlen = d.coin(0.3);
  c.batch = c.varlen ? 1 : d.pick({0, 1, 2, 3});
  c.seqlen = d.pick({0, 1, 2, d.uniform(1, 20), d.uniform(20, 70)});
  c.heads = d.uniform(1, 4);
  c.head_dim = d.head_dim();
  c.out_dtype = d.pick({DType::F32, DType::F16, DType::BF16});
  c.with_lse = d.coin(0.7);
  c.empty_share = d.pick({0.f, 0.f, 0.1f, 0.5f, 0.9f});
  c.seed = rng();
  return c;
}

namespace {

// floats as the C++ source that replays them needs them (9 digits)
std::string scale_string(const std::optional<float>& scale) {
  if (!scale) return "default";
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", double(*scale));
  return text;
}

}  // namespace

std::string describe(const AttentionCase& c) {
  std::ostringstream s;
  auto list = [&](const char* name, const std::vector<int>& v) {
    s << " " << name << "={";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
    s << "}";
  };
  s << c.name() << ": batch=" << c.batch << " seqlen_q=" << c.seqlen_q << " seqlen_k=" << c.seqlen_k
    << " heads=" << c.heads_q << "/" << c.heads_k << " d=" << c.head_dim << " dv=" << c.dv()
    << " dtype=" << dtype_name(c.dtype) << " causal=" << c.causal << " window=(" << c.window_left << ","
    << c.window_right << ") softcap=" << scale_string(c.softcap) << " alibi=" << c.alibi << " dropout=" << c.dropout_p
    << " splits=" << c.num_splits << " scale=" << scale_string(c.softmax_scale)
    << " data seed=" << c.seed;
  if (c.varlen()) {
    list("varlen_q", c.varlen_q);
    list("varlen_k", c.varlen_k);
  }
  if (!c.seqused_k.empty()) list("seqused_k", c.seqused_k);
  return s.str();
}

std::string describe(const KvCase& c) {
  std::ostringstream s;
  s << c.name() << ": window=(" << c.window_left << "," << c.window_right << ") softcap=" << scale_string(c.softcap)
    << " scale=" << scale_string(c.softmax_scale) << " data seed=" << c.seed;
  return s.str();
}

}  // namespace flashattn::test
