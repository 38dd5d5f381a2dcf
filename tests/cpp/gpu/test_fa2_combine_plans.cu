// The split-KV combine's plans (combine_plan.h: float4 or scalar columns, 1 to 8 warps per row)
// forced, against the
// double-precision check of combine_case.cpp, and against each other with NaN inputs. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "api/validate.h"
#include "combine_case.h"
#include "device_mirror.h"
#include "fa2/fa2_backend.h"
#include "fuzz_case.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

using fa2::CombinePlan;

// The call mirrored onto the device and run by fa2::combine with `plan`.
Status combine_on_device_with(const CombineParams& host, const CombinePlan& plan) {
  gpu_test::DeviceMirror m;
  CombineParams d = host;
  d.out_partial = m.upload(host.out_partial);
  d.lse_partial = m.upload(host.lse_partial);
  d.out = m.output(host.out);
  d.softmax_lse = m.output(host.softmax_lse);
  CombineProblem problem;
  if (Status st = api::make_combine_problem(d, &problem); !st.ok()) return st;
  const Status st = fa2::combine(problem, nullptr, &plan);
  m.download();
  return st;
}

CombineRunner runner_with(const CombinePlan& plan) {
  return [plan](const CombineParams& p) { return combine_on_device_with(p, plan); };
}

const CombinePlan kSplitWeights1{1};
// Every width with every count of warps per row.
const CombinePlan kAllPlans[] = {{1, 1}, {4, 1}, {1, 2}, {4, 2}, {1, 4}, {4, 4}, {1, 8}, {4, 8}};

std::string plan_name(const CombinePlan& plan) {
  return "vector_width " + std::to_string(plan.vector_width) + ", warps_per_row " + std::to_string(plan.warps_per_row);
}

TEST(Fa2CombinePlan, SplitWeightsFixedCases) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const CombinePlan& plan : kAllPlans) {
    SCOPED_TRACE(plan_name(plan));
    check_combine(false, DType::F32, Backend::Fa2, runner_with(plan));
    check_combine(false, DType::BF16, Backend::Fa2, runner_with(plan));
    check_combine(true, DType::F16, Backend::Fa2, runner_with(plan));
  }
}

// Split counts around the 32-split chunks and the 8-load batches (of one warp, and shared by up to
// eight), head dims around the 128-column passes of float4 lanes (the API takes multiples of 8).
TEST(Fa2CombinePlan, SplitWeightsChunkAndPassEdges) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int splits : {1, 3, 7, 8, 9, 31, 32, 33, 64, 100, 257, 300})
    for (int head_dim : {8, 40, 120, 128, 136, 256})
      for (const CombinePlan& plan : kAllPlans) {
        CombineCase c;
        c.splits = splits;
        c.batch = 2;
        c.seqlen = 5;
        c.heads = 3;
        c.head_dim = head_dim;
        c.out_dtype = DType::BF16;
        c.empty_share = 0.2f;
        c.seed = uint64_t(splits) * 1000 + head_dim;
        SCOPED_TRACE(plan_name(plan));
        check_combine_case(c, Backend::Fa2, runner_with(plan));
      }
}

TEST(Fa2CombinePlan, SplitWeightsFuzz) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  FuzzScope scope;
  for (int n = 0; n < 200; ++n) {
    const CombineCase c = draw_combine_case(rng, scope);
    CombinePlan plan = kAllPlans[n % std::size(kAllPlans)];
    if (c.head_dim % 4 != 0) plan.vector_width = 1;
    SCOPED_TRACE(plan_name(plan));
    check_combine_case(c, Backend::Fa2, runner_with(plan));
  }
}

// NaN semantics, every plan on the same inputs: a NaN partial of a split that saw no key (LSE
// -inf) never reaches the row; a NaN partial of a live split, and a NaN LSE, do.
TEST(Fa2CombinePlan, SplitWeightsWidthsAgreeWithNaN) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int splits = 40, batch = 2, seqlen = 6, heads = 2, dim = 64;
  std::mt19937_64 rng(7);
  HostTensor out_partial(DType::F32, {splits, batch, seqlen, heads, dim});
  HostTensor lse_partial(DType::F32, {splits, batch, heads, seqlen});
  out_partial.fill_normal(rng);
  lse_partial.fill_uniform(rng, -4.f, 30.f);
  float* op = out_partial.as<float>();
  float* lp = lse_partial.as<float>();
  const auto out_at = [&](int s, int b, int i, int h, int x) -> float& {
    return op[((((int64_t(s) * batch + b) * seqlen + i) * heads + h) * dim) + x];
  };
  const auto lse_at = [&](int s, int b, int h, int i) -> float& { return lp[((int64_t(s) * batch + b) * heads + h) * seqlen + i]; };
  lse_at(3, 0, 0, 0) = -INFINITY;  // dead split with a NaN partial: row (0, 0, 0) stays finite
  out_at(3, 0, 0, 0, 5) = NAN;
  out_at(35, 0, 1, 1, 9) = NAN;  // live split: column 9 of row (0, 1, 1) is NaN
  lse_at(20, 1, 0, 2) = NAN;     // NaN LSE: row (1, 2, 0) all NaN, its LSE too

  HostTensor out_default(DType::F32, {batch, seqlen, heads, dim}), lse_default(DType::F32, {batch, heads, seqlen});
  HostTensor out_new(DType::F32, {batch, seqlen, heads, dim}), lse_new(DType::F32, {batch, heads, seqlen});
  for (HostTensor* t : {&out_default, &lse_default, &out_new, &lse_new}) t->poison();
  CombineParams p;
  p.out_partial = out_partial.view();
  p.lse_partial = lse_partial.view();
  p.backend = Backend::Fa2;
  p.out = out_default.view();
  p.softmax_lse = lse_default.view();
  ASSERT_TRUE(combine_on_device_with(p, kSplitWeights1).ok());
  for (const CombinePlan& plan : kAllPlans) {
    SCOPED_TRACE(plan_name(plan));
    out_new.poison();
    lse_new.poison();
    p.out = out_new.view();
    p.softmax_lse = lse_new.view();
    const Status st = combine_on_device_with(p, plan);
    ASSERT_TRUE(st.ok()) << st.message();
    const auto same = [](float a, float b) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
      return std::fabs(a - b) <= 1e-6f * (1.f + std::fabs(a));
    };
    for (int64_t e = 0; e < out_new.numel(); ++e)
      ASSERT_TRUE(same(out_default.as<float>()[e], out_new.as<float>()[e]))
          << "out element " << e << ": " << out_default.as<float>()[e] << " vs " << out_new.as<float>()[e];
    for (int64_t e = 0; e < lse_new.numel(); ++e)
      ASSERT_TRUE(same(lse_default.as<float>()[e], lse_new.as<float>()[e])) << "lse element " << e;
    EXPECT_FALSE(std::isnan(out_new.as<float>()[5])) << "a dead split's NaN reached the row";
    EXPECT_TRUE(std::isnan(out_new.as<float>()[((int64_t(0) * seqlen + 1) * heads + 1) * dim + 9]));
    EXPECT_TRUE(std::isnan(out_new.as<float>()[((int64_t(1) * seqlen + 2) * heads + 0) * dim + 0]));
    EXPECT_TRUE(std::isnan(lse_new.as<float>()[(int64_t(1) * heads + 0) * seqlen + 2]));
  }
}

}  // namespace
}  // namespace flashattn::test
