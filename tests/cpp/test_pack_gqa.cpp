// Pack-GQA of single-query problems (common/pack_gqa.h): the re-addressing, when it applies, and
// the CPU forward that uses it against the naive reference (which never packs) on strided q,
// out and lse.
#include <gtest/gtest.h>

#include <random>

#include "api/validate.h"
#include "attention_case.h"
#include "common/pack_gqa.h"
#include "cpu/reference.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

AttnProblem decode_problem() {
  AttnProblem p;
  p.batch = 3;
  p.heads_q = 8;
  p.heads_k = 2;
  p.head_dim = p.head_dim_v = 16;
  p.lens.seqlen_q = 1;
  p.lens.seqlen_k = 40;
  p.lens.total_q = 3;
  p.q = {nullptr, 1000, 333, 20};  // batch, row, head strides (the row stride is unused: one row)
  p.out = {nullptr, 900, 777, 17};
  p.lse.batch_stride = 50;
  p.lse.head_stride = 3;
  p.lse.row_stride = 1;
  p.mask.window_right = 0;  // causal
  return p;
}

TEST(PackGqa, QueryHeadsBecomeRowsOfTheirKvHead) {
  const AttnProblem p = decode_problem();
  ASSERT_TRUE(can_pack_gqa_rows(p));
  const AttnProblem packed = pack_gqa_rows(p);
  EXPECT_EQ(packed.heads_q, 2);
  EXPECT_EQ(packed.lens.seqlen_q, 4);
  EXPECT_EQ(packed.lens.total_q, 12);
  EXPECT_FALSE(packed.mask.limits_keys());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < 2; ++hk)
      for (int64_t g = 0; g < 4; ++g) {
        EXPECT_EQ(packed.q.offset(b, g, hk), p.q.offset(b, 0, hk * 4 + g));
        EXPECT_EQ(packed.out.offset(b, g, hk), p.out.offset(b, 0, hk * 4 + g));
        EXPECT_EQ(packed.lse.offset(b, g, hk), p.lse.offset(b, 0, hk * 4 + g));
        EXPECT_EQ(packed.kv_head(hk), p.kv_head(hk * 4 + g));
      }
}

TEST(PackGqa, OnlyWhereRowsDoNotDependOnPositionOrHead) {
  const AttnProblem base = decode_problem();
  const auto packs = [&](auto change) {
    AttnProblem p = base;
    change(p);
    return can_pack_gqa_rows(p);
  };
  EXPECT_FALSE(packs([](AttnProblem& p) { p.heads_k = p.heads_q; }));  // MHA: nothing to share
  EXPECT_FALSE(packs([](AttnProblem& p) { p.lens.seqlen_q = 2; }));
  EXPECT_FALSE(packs([](AttnProblem& p) { p.mask.window_left = 10; }));
  const float slopes[8] = {};
  EXPECT_FALSE(packs([&](AttnProblem& p) { p.alibi_slopes = slopes; }));
  EXPECT_FALSE(packs([](AttnProblem& p) { p.dropout_p = 0.1f; }));
  const int32_t cu[4] = {0, 1, 2, 3};
  EXPECT_FALSE(packs([&](AttnProblem& p) {
    p.lens.cu_seqlens_q = cu;
    p.q.cu_seqlens = cu;
  }));
  EXPECT_TRUE(packs([](AttnProblem& p) { p.score.softcap = 5.f; }));
  EXPECT_TRUE(packs([](AttnProblem& p) { p.mask.window_right = 3; }));
}

// The CPU forward packs decode problems; q, out and lse with padded strides, GQA 16/2, causal,
// softcap, splits, against the unpacked reference.
TEST(PackGqa, CpuDecodeMatchesReference) {
  std::mt19937_64 rng(91);
  const int b = 3, hq = 16, hk = 2, d = 64, sk = 300;
  HostTensor q_buf(DType::BF16, {b, 1, hq, d + 8}), k(DType::BF16, {b, sk, hk, d}), v(DType::BF16, {b, sk, hk, d});
  q_buf.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  HostTensor out_buf(DType::BF16, {b, 1, hq, d + 16}), lse_buf(DType::F32, {b, hq, 3});
  for (int splits : {1, 0, 5}) {
    for (float softcap : {0.f, 10.f}) {
      SCOPED_TRACE("splits " + std::to_string(splits) + " softcap " + std::to_string(softcap));
      out_buf.poison();
      lse_buf.poison();
      FwdParams p;
      p.q = TensorView::strided(q_buf.data(), DType::BF16, {b, 1, hq, d}, {hq * (d + 8), hq * (d + 8), d + 8, 1});
      p.k = k.view();
      p.v = v.view();
      p.out = TensorView::strided(out_buf.data(), DType::BF16, {b, 1, hq, d},
                                  {hq * (d + 16), hq * (d + 16), d + 16, 1});
      p.softmax_lse = TensorView::strided(lse_buf.data(), DType::F32, {b, hq, 1}, {hq * 3, 3, 1});
      p.causal = true;
      p.softcap = softcap;
      p.num_splits = splits;
      p.backend = Backend::Cpu;
      ASSERT_TRUE(fwd(p).ok());

      HostTensor out64(DType::F32, {b, 1, hq, d}), lse64(DType::F32, {b, hq, 1});
      HostTensor out_lp(DType::BF16, {b, 1, hq, d}), lse_lp(DType::F32, {b, hq, 1});
      for (auto [o, l, precision] : {std::tuple{&out64, &lse64, cpu::reference::Precision::Float64},
                                     std::tuple{&out_lp, &lse_lp, cpu::reference::Precision::InputPrecision}}) {
        FwdParams r = p;
        r.out = o->view();
        r.softmax_lse = l->view();
        AttnProblem problem;
        ASSERT_TRUE(api::make_fwd_problem(r, &problem, {.allow_f32_outputs = true}).ok());
        cpu::reference::fwd(problem, precision);
      }
      std::vector<float> got, got_lse;
      for (int bi = 0; bi < b; ++bi)
        for (int h = 0; h < hq; ++h) {
          for (int e = 0; e < d; ++e) got.push_back(out_buf.get((bi * hq + h) * (d + 16) + e));
          got_lse.push_back(lse_buf.get((bi * hq + h) * 3));
        }
      const std::vector<float> r = out64.to_float(), rl = lse64.to_float();
      const double err = max_abs_diff(got, r), err_lp = max_abs_diff(out_lp.to_float(), r);
      EXPECT_LE(err, 2 * err_lp + rounding_floor(DType::BF16, max_abs(r))) << err << " vs " << err_lp;
      EXPECT_LE(max_abs_diff(got_lse, rl), 2 * max_abs_diff(lse_lp.to_float(), rl) + 1e-5 * max_abs(rl));
    }
  }
}

}  // namespace
}  // namespace flashattn::test
