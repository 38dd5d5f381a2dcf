// NaN in, NaN out: a NaN in q, k, v, dout or an ALiBi slope reaches exactly the outputs that the
// naive reference lets it reach (the rows that see it, the keys they see), on the tiled forward,
// backward, split-KV with combine, and fwd_kvcache. Everything else matches the reference.
#include <gtest/gtest.h>

#include <cmath>

#include "api/validate.h"
#include "attention_case.h"
#include "cpu/reference.h"

namespace flashattn::test {
namespace {

enum class Poke { Q, K, V, Dout, Alibi };

const char* poke_name(Poke p) {
  switch (p) {
    case Poke::Q: return "q";
    case Poke::K: return "k";
    case Poke::V: return "v";
    case Poke::Dout: return "dout";
    case Poke::Alibi: return "alibi";
  }
  return "?";
}

// A NaN in one element: row `row` (a key for k and v) of head `head` of sequence `b`. Varlen
// cases give b = 0 (rows are packed).
struct NanCase {
  AttentionCase attn;
  Poke poke = Poke::Q;
  int b = 0, row = 0, head = 0;
  bool reaches_outputs = true;  // false: no row sees the NaN
  std::string name() const { return attn.name() + "_nan_in_" + poke_name(poke) + "_row" + std::to_string(row); }
};
inline void PrintTo(const NanCase& c, std::ostream* os) { *os << c.name(); }

void poke_nan(AttentionRun& run, const NanCase& n) {
  const AttentionCase& c = run.config();
  auto element = [&](HostTensor& t, int heads, int dim) {
    const std::vector<int64_t>& s = t.shape();
    const int64_t rows_before = s.size() == 4 ? int64_t(n.b) * s[1] + n.row : n.row;
    t.set((rows_before * heads + n.head) * dim + dim / 3, std::nanf(""));
  };
  switch (n.poke) {
    case Poke::Q: element(run.q, c.heads_q, c.head_dim); break;
    case Poke::K: element(run.k, c.heads_k, c.head_dim); break;
    case Poke::V: element(run.v, c.heads_k, c.dv()); break;
    case Poke::Dout: element(run.dout, c.heads_q, c.dv()); break;
    case Poke::Alibi: run.alibi_slopes.set(c.alibi == 2 ? n.b * c.heads_q + n.head : n.head, std::nanf("")); break;
  }
}

// Where fast and the float64 reference disagree on NaN, and the errors elsewhere.
struct Comparison {
  int64_t nan_mismatches = 0, reference_nans = 0, elements = 0;
  Errors errors;
};

Comparison compare(const HostTensor& fast, const HostTensor& ref64, const HostTensor& same_precision) {
  const std::vector<float> f = fast.to_float(), r = ref64.to_float(), s = same_precision.to_float();
  Comparison out;
  out.elements = int64_t(r.size());
  std::vector<float> f_finite, r_finite, s_finite;
  for (size_t i = 0; i < r.size(); ++i) {
    out.reference_nans += std::isnan(r[i]);
    if (std::isnan(r[i]) != std::isnan(f[i])) {
      ++out.nan_mismatches;
    } else if (!std::isnan(r[i])) {
      f_finite.push_back(f[i]);
      r_finite.push_back(r[i]);
      s_finite.push_back(s[i]);
    }
  }
  out.errors = {max_abs_diff(f_finite, r_finite), max_abs_diff(s_finite, r_finite), max_abs(r_finite)};
  return out;
}

void expect_matches(const Comparison& c, DType dtype, const std::string& what, bool expect_nans) {
  EXPECT_EQ(c.nan_mismatches, 0) << what << ": NaN where the reference has none, or the other way round";
  if (expect_nans) EXPECT_GT(c.reference_nans, 0) << what << ": the case puts no NaN in " << what;
  if (!expect_nans) EXPECT_EQ(c.reference_nans, 0) << what << ": the case expects no NaN in " << what;
  EXPECT_LT(c.reference_nans, c.elements) << what << ": NaN everywhere proves nothing";
  expect_within(c.errors, 2.0, rounding_floor(dtype, c.errors.reference_max) * (what == "lse" ? 8 : 1), what);
}

class NanPropagation : public ::testing::TestWithParam<NanCase> {};

TEST_P(NanPropagation, ForwardAndBackwardMatchTheReference) {
  const NanCase& n = GetParam();
  const AttentionCase& c = n.attn;
  AttentionRun run(c);
  poke_nan(run, n);
  using cpu::reference::Precision;

  // Forward: the tiled path, then the reference in float64 and in the input precision.
  const std::vector<int64_t> out_shape = run.q.shape().size() == 4
                                             ? std::vector<int64_t>{c.batch, c.seqlen_q, c.heads_q, c.dv()}
                                             : std::vector<int64_t>{run.q.shape()[0], c.heads_q, c.dv()};
  const std::vector<int64_t> lse_shape = run.q.shape().size() == 4
                                             ? std::vector<int64_t>{c.batch, c.heads_q, c.seqlen_q}
                                             : std::vector<int64_t>{c.heads_q, run.q.shape()[0]};
  run.out = HostTensor(c.dtype, out_shape);
  run.lse = HostTensor(DType::F32, lse_shape);
  const Status st = fwd(run.fwd_params(run.out.view(), run.lse.view(), Backend::Cpu));
  ASSERT_TRUE(st.ok()) << st.message();
  HostTensor out64(DType::F32, out_shape), lse64(DType::F32, lse_shape);
  HostTensor out_lp(c.dtype, out_shape), lse_lp(DType::F32, lse_shape);
  for (auto [o, l, precision] : {std::tuple{&out64, &lse64, Precision::Float64},
                                 std::tuple{&out_lp, &lse_lp, Precision::InputPrecision}}) {
    AttnProblem problem;
    ASSERT_TRUE(api::make_fwd_problem(run.fwd_params(o->view(), l->view(), Backend::Cpu), &problem,
                                      {.allow_f32_outputs = true})
                    .ok());
    cpu::reference::fwd(problem, precision);
  }
  const bool forward_nans = n.reaches_outputs && n.poke != Poke::Dout;
  expect_matches(compare(run.out, out64, out_lp), c.dtype, "out", forward_nans);
  expect_matches(compare(run.lse, lse64, lse_lp), DType::F32, "lse", forward_nans && n.poke != Poke::V);

  // Backward from the tiled forward's out and lse; the reference recomputes everything.
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  const Status bst = bwd(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Cpu));
  ASSERT_TRUE(bst.ok()) << bst.message();
  HostTensor dq64(DType::F32, run.q.shape()), dk64(DType::F32, run.k.shape()), dv64(DType::F32, run.v.shape());
  HostTensor dq_lp(c.dtype, run.q.shape()), dk_lp(c.dtype, run.k.shape()), dv_lp(c.dtype, run.v.shape());
  for (auto [gq, gk, gv, precision] : {std::tuple{&dq64, &dk64, &dv64, Precision::Float64},
                                       std::tuple{&dq_lp, &dk_lp, &dv_lp, Precision::InputPrecision}}) {
    BwdProblem problem;
    ASSERT_TRUE(api::make_bwd_problem(run.bwd_params(gq->view(), gk->view(), gv->view(), Backend::Cpu), &problem,
                                      {.allow_f32_outputs = true})
                    .ok());
    cpu::reference::bwd(problem, precision);
  }
  expect_matches(compare(dq, dq64, dq_lp), c.dtype, "dq", n.reaches_outputs);
  expect_matches(compare(dk, dk64, dk_lp), c.dtype, "dk", n.reaches_outputs);
  expect_matches(compare(dv, dv64, dv_lp), c.dtype, "dv", n.reaches_outputs && n.poke != Poke::V);
}

std::vector<NanCase> nan_cases() {
  std::vector<NanCase> cases;
  auto add = [&](AttentionCase c, Poke poke, int b, int row, int head, bool reaches_outputs = true) {
    c.seed = cases.size() + 1;
    cases.push_back({c, poke, b, row, head, reaches_outputs});
  };
  AttentionCase dense;
  dense.batch = 2;
  dense.seqlen_q = 150;
  dense.seqlen_k = 150;
  dense.heads_q = 2;
  dense.heads_k = 2;
  dense.dtype = DType::F32;
  add(dense, Poke::Q, 1, 70, 1);  // the issue: one NaN in q made its row 0 with LSE -inf
  add(dense, Poke::K, 0, 140, 0);
  add(dense, Poke::V, 1, 3, 1);
  dense.alibi = 1;
  add(dense, Poke::Alibi, 0, 0, 1);  // a NaN slope zeroed its head
  dense.alibi = 2;
  add(dense, Poke::Alibi, 1, 0, 0);

  // Causal with sk > sq: key 250 sits in a key tile that rows 0..127 load but only rows 150 and
  // later see, so a NaN there must not leak through the zero weights of the hidden rows.
  AttentionCase causal = dense;
  causal.alibi = 0;
  causal.seqlen_q = 200;
  causal.seqlen_k = 300;
  causal.causal = true;
  causal.dtype = DType::BF16;
  for (Poke poke : {Poke::K, Poke::V}) add(causal, poke, 0, 250, 1);
  add(causal, Poke::Q, 1, 130, 0);
  add(causal, Poke::Dout, 1, 130, 0);
  {
    AttentionCase c = causal;
    c.heads_q = 4;  // GQA: both query heads of the group see the key
    add(c, Poke::K, 1, 200, 1);
    add(c, Poke::V, 0, 101, 0);
  }
  {
    AttentionCase c = causal;  // rows 0..99 see no key: a NaN in their q changes nothing
    c.seqlen_q = 300;
    c.seqlen_k = 100;
    add(c, Poke::Q, 0, 10, 0, /*reaches_outputs=*/false);
    add(c, Poke::Q, 0, 250, 1);
  }
  {
    AttentionCase c = causal;
    c.window_left = 20;
    c.window_right = 10;
    add(c, Poke::V, 0, 150, 0);
    add(c, Poke::Q, 0, 100, 1);
    add(c, Poke::Dout, 1, 60, 1);
  }
  {
    AttentionCase c = causal;
    c.dropout_p = 0.2f;
    add(c, Poke::V, 1, 240, 0);
    add(c, Poke::Dout, 0, 190, 1);
  }
  {
    AttentionCase c = causal;
    c.softcap = 2.f;
    c.alibi = 1;
    add(c, Poke::Q, 0, 199, 0);
    add(c, Poke::Alibi, 0, 0, 1);
  }
  {
    AttentionCase c = causal;  // split-KV: NaN in one split's LSE, or only in its output
    c.num_splits = 3;
    add(c, Poke::Q, 1, 180, 1);
    add(c, Poke::K, 0, 20, 0);
    add(c, Poke::V, 0, 290, 1);
  }
  {
    AttentionCase c = causal;
    c.varlen_q = {30, 150, 77};
    c.varlen_k = {50, 200, 77};
    add(c, Poke::Q, 0, 100, 0);   // sequence 1, row 70
    add(c, Poke::V, 0, 170, 1);   // sequence 1, key 120
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, NanPropagation, ::testing::ValuesIn(nan_cases()), ParamTestName());

// fwd_kvcache: a NaN in q, in a cached key a sequence uses, and in a slot past its cache_seqlens.
TEST(NanPropagation, KvCacheMatchesTheReference) {
  const int batch = 3, capacity = 300, heads_q = 4, heads_k = 2, d = 64;
  std::mt19937_64 rng(11);
  HostTensor q(DType::BF16, {batch, 1, heads_q, d});
  HostTensor k_cache(DType::BF16, {batch, capacity, heads_k, d}), v_cache(k_cache);
  q.fill_normal(rng);
  k_cache.fill_normal(rng);
  v_cache.fill_normal(rng);
  HostTensor lens = int_tensor({100, 250, 280});
  q.set((0 * heads_q + 3) * d + 5, std::nanf(""));                    // sequence 0, head 3
  k_cache.set(((1 * capacity + 200) * heads_k + 0) * d, std::nanf(""));  // sequence 1 uses key 200
  v_cache.set(((0 * capacity + 200) * heads_k + 1) * d, std::nanf(""));  // sequence 0 has 100 keys
  v_cache.set(((2 * capacity + 279) * heads_k + 1) * d, std::nanf(""));  // sequence 2's last key

  for (int splits : {1, 4}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    auto params = [&](TensorView out, TensorView lse) {
      KvCacheParams p;
      p.q = q.view();
      p.k_cache = k_cache.view();
      p.v_cache = v_cache.view();
      p.cache_seqlens = lens.view();
      p.num_splits = splits;
      p.out = out;
      p.softmax_lse = lse;
      p.backend = Backend::Cpu;
      return p;
    };
    HostTensor out(DType::BF16, {batch, 1, heads_q, d}), lse(DType::F32, {batch, heads_q, 1});
    const Status st = fwd_kvcache(params(out.view(), lse.view()));
    ASSERT_TRUE(st.ok()) << st.message();
    HostTensor out64(DType::F32, out.shape()), lse64(DType::F32, lse.shape());
    HostTensor out_lp(DType::BF16, out.shape()), lse_lp(DType::F32, lse.shape());
    for (auto [o, l, precision] : {std::tuple{&out64, &lse64, cpu::reference::Precision::Float64},
                                   std::tuple{&out_lp, &lse_lp, cpu::reference::Precision::InputPrecision}}) {
      KvCacheProblem problem;
      ASSERT_TRUE(api::make_kvcache_problem(params(o->view(), l->view()), &problem, {.allow_f32_outputs = true}).ok());
      cpu::reference::fwd_kvcache(problem, precision);
    }
    const Comparison o = compare(out, out64, out_lp), l = compare(lse, lse64, lse_lp);
    expect_matches(o, DType::BF16, "out", true);
    expect_matches(l, DType::F32, "lse", true);
    // Whole rows: sequence 0 head 3 (q), sequence 1 heads 0 and 1 (k); one column (the NaN's):
    // sequence 2 heads 2 and 3 (v).
    EXPECT_EQ(o.reference_nans, 3 * d + 2);
    EXPECT_EQ(l.reference_nans, 3);
  }
}

// combine on its own: one NaN LSE, and one NaN partial output whose weight underflows to 0.
TEST(NanPropagation, CombineKeepsNan) {
  const int splits = 3, rows = 4, d = 8;
  HostTensor out_partial(DType::F32, {splits, 1, rows, 1, d}), lse_partial(DType::F32, {splits, 1, 1, rows});
  for (int64_t i = 0; i < out_partial.numel(); ++i) out_partial.set(i, 0.5f);
  for (int64_t i = 0; i < lse_partial.numel(); ++i) lse_partial.set(i, 1.f);
  lse_partial.set(1 * rows + 0, std::nanf(""));         // row 0: split 1's LSE
  for (int s = 0; s < splits; ++s) lse_partial.set(s * rows + 1, std::nanf(""));  // row 1: every split's
  lse_partial.set(2 * rows + 2, -200.f);                // row 2: split 2 weighs exp(-201) = 0 in float
  out_partial.set((2 * rows + 2) * d + 4, std::nanf(""));  //         but its output holds a NaN
  lse_partial.set(0 * rows + 3, -INFINITY);             // row 3: split 0 saw no key: its NaN is ignored
  out_partial.set((0 * rows + 3) * d + 1, std::nanf(""));
  HostTensor out(DType::F32, {1, rows, 1, d}), lse(DType::F32, {1, 1, rows});
  CombineParams p;
  p.out_partial = out_partial.view();
  p.lse_partial = lse_partial.view();
  p.out = out.view();
  p.softmax_lse = lse.view();
  ASSERT_TRUE(combine(p).ok());
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    EXPECT_EQ(std::isnan(lse.get(r)), r < 2);
    for (int x = 0; x < d; ++x) EXPECT_EQ(std::isnan(out.get(r * d + x)), r < 2 || (r == 2 && x == 4)) << x;
  }
  EXPECT_FLOAT_EQ(out.get(3 * d + 1), 0.5f);
  EXPECT_FLOAT_EQ(lse.get(3), 1.f + std::log(2.f));
}

}  // namespace
}  // namespace flashattn::test
