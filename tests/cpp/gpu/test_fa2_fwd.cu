// FA2 forward kernels against the naive reference (float64 and same-precision) over the feature
// sweep, plus a race check. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "attention_case.h"
#include "common/pack_gqa.h"
#include "device_mirror.h"
#include "forced_plans.h"
#include "forward_race.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

std::vector<AttentionCase> gpu_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : feature_sweep())
    if (c.dtype != DType::F32) cases.push_back(c);  // the FA2 kernels take fp16/bf16
  return cases;
}

class Fa2Forward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa2Forward, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  const FwdResult f = run.check_fwd(Backend::Fa2, gpu_test::fwd_on_device);
  expect_within(f.out, 2.0, rounding_floor(c.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

// The base tiles (fa2::fwd_base_plan: what sm80 runs outside decoding), forced where this GPU's
// plan takes others: d256 on sm90 (128 x 64, 8 warps) and decoding (the 64 x 64 decode tiles).
gpu_test::Fa2FwdChoice base_tiles_where_not_default() {
  return gpu_test::checked([](const AttnProblem& call, const fa2::DeviceLimits& limits) -> std::optional<fa2::FwdPlan> {
    const fa2::FwdPlan base = fa2::fwd_base_plan(call, limits);
    if (base == fa2::fwd_plan(call, limits)) return std::nullopt;
    return base;
  });
}

TEST_P(Fa2Forward, BaseTilesMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  const gpu_test::Fa2FwdChoice choose = base_tiles_where_not_default();
  if (!choose(run.problem(), gpu_test::fa2_limits())) GTEST_SKIP() << "the plan on this GPU takes the base tiles already";
  const FwdResult f = run.check_fwd(Backend::Fa2, gpu_test::on_device(gpu_test::fa2_fwd_with(choose)));
  expect_within(f.out, 2.0, rounding_floor(c.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

// The query heads of each KV head packed into rows for any seqlen_q (FwdPlan::pack_gqa_queries,
// fa2::fwd_packed_queries_tiles; forced only until it has run here), wherever the call can pack
// (not varlen queries, not dropout): GQA and MHA (G = 1), masks, softcap, ALiBi, splits.
gpu_test::Fa2FwdChoice packed_query_heads() {
  return gpu_test::checked([](const AttnProblem& call, const fa2::DeviceLimits& limits) -> std::optional<fa2::FwdPlan> {
    if (!can_pack_gqa_queries(call)) return std::nullopt;
    return fa2::fwd_packed_queries_tiles(call, limits);
  });
}

TEST_P(Fa2Forward, PackedQueryHeadsMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  const gpu_test::Fa2FwdChoice choose = packed_query_heads();
  if (!choose(run.problem(), gpu_test::fa2_limits())) GTEST_SKIP() << "the call cannot pack query heads (varlen or dropout)";
  const FwdResult f = run.check_fwd(Backend::Fa2, gpu_test::on_device(gpu_test::fa2_fwd_with(choose)));
  expect_within(f.out, 2.0, rounding_floor(c.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2Forward, ::testing::ValuesIn(gpu_sweep()), ParamTestName());

// d256, whose sm90 tiles (128 x 64, 8 warps) differ from the other head dims': split-KV (given and
// automatic, for a single query row), varlen with causal, GQA.
std::vector<AttentionCase> d256_cases() {
  const AttentionCase split{.batch = 2, .seqlen_q = 300, .seqlen_k = 1000, .heads_q = 8, .heads_k = 2, .head_dim = 256,
                            .causal = true, .num_splits = 3};
  AttentionCase decode = split;
  decode.seqlen_q = 1;
  decode.causal = false;
  decode.num_splits = 0;
  const AttentionCase varlen{.batch = 3, .heads_q = 8, .heads_k = 2, .head_dim = 256, .causal = true,
                             .varlen_q = {130, 0, 257}, .varlen_k = {200, 70, 257}};
  return {split, decode, varlen};
}

INSTANTIATE_TEST_SUITE_P(D256, Fa2Forward, ::testing::ValuesIn(d256_cases()), ParamTestName());

// Decoding: one query row, GQA packed into rows of the KV head (common/pack_gqa.h), the 64-row
// decode tiles with idle warps, and the wave rule's split counts; plus the shapes packing must
// leave alone (MHA, a left window, ALiBi) and a few rows (speculative decoding, 64-row tiles).
std::vector<AttentionCase> decode_cases() {
  std::vector<AttentionCase> cases;
  for (int d : {64, 128, 256})
    for (auto [hq, hk] : {std::pair{32, 8}, {16, 2}, {8, 1}, {4, 4}})
      for (int sk : {1, 77, 3000}) {
        AttentionCase c{.batch = 3, .seqlen_q = 1, .seqlen_k = sk, .heads_q = hq, .heads_k = hk, .head_dim = d,
                        .causal = sk % 2 == 1, .num_splits = 0};
        c.seed = cases.size() + 501;
        cases.push_back(c);
      }
  const AttentionCase base{.batch = 2, .seqlen_q = 1, .seqlen_k = 900, .heads_q = 16, .heads_k = 4, .head_dim = 128,
                           .num_splits = 0};
  AttentionCase c = base;
  c.softcap = 30.f;
  cases.push_back(c);
  c = base;
  c.window_left = 100;
  c.causal = true;
  cases.push_back(c);
  c = base;
  c.alibi = 1;
  cases.push_back(c);
  c = base;
  c.num_splits = 7;
  cases.push_back(c);
  c = base;
  c.dtype = DType::F16;
  c.seqused_k = {5, 900};
  cases.push_back(c);
  for (int sq : {4, 16, 17}) {
    c = base;
    c.seqlen_q = sq;
    c.causal = true;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) cases[i].seed = 501 + i;
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Decode, Fa2Forward, ::testing::ValuesIn(decode_cases()), ParamTestName());

// Speculative decoding through fwd: a few query tokens (2..16) of GQA 1/4/8/16 against a longer key
// sequence, causal (bottom-right), windows, softcap, ALiBi per head, split-KV; and more rows than
// one tile holds. PackedQueryHeadsMatchReference is the test these are for.
std::vector<AttentionCase> speculative_cases() {
  std::vector<AttentionCase> cases;
  int i = 0;
  for (int sq : {2, 3, 4, 6, 9, 16})
    for (int group : {1, 4, 8, 16}) {
      AttentionCase c{.batch = 2, .seqlen_q = sq, .seqlen_k = 200 + 37 * i, .heads_q = 2 * group, .heads_k = 2,
                      .head_dim = i % 3 == 0 ? 64 : i % 3 == 1 ? 128 : 256, .causal = i % 5 != 4,
                      .num_splits = i % 4 == 3 ? 0 : 1 + i % 4 * 2};  // 1, 3, 5, automatic
      if (i % 5 == 1) c.window_left = 30;
      if (i % 5 == 2) c.alibi = 1 + i % 2;
      if (i % 5 == 3) c.softcap = 20.f;
      if (i % 5 == 4) {  // a window on both sides, not causal
        c.window_left = 40;
        c.window_right = 2;
      }
      c.dtype = i % 2 == 0 ? DType::BF16 : DType::F16;
      cases.push_back(c);
      ++i;
    }
  for (size_t j = 0; j < cases.size(); ++j) cases[j].seed = 901 + j;
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Speculative, Fa2Forward, ::testing::ValuesIn(speculative_cases()), ParamTestName());

// A race shows as results that move between runs of the same inputs.
TEST(Fa2ForwardRace, HundredRunsAreBitwiseEqual) {
  SKIP_WITHOUT_CUDA_DEVICE();
  AttentionCase c;
  c.batch = 2;
  c.seqlen_q = 1000;
  c.seqlen_k = 1500;
  c.heads_q = 8;
  c.heads_k = 2;
  c.head_dim = 128;
  c.causal = true;
  expect_forward_runs_bitwise_equal(c, Backend::Fa2, 100);
  c.head_dim = 96;  // the loader with idle threads (12 chunks per row)
  expect_forward_runs_bitwise_equal(c, Backend::Fa2, 100);
  c.head_dim = 256;  // 8 warps where the GPU has the shared memory for 128x64 tiles
  expect_forward_runs_bitwise_equal(c, Backend::Fa2, 100);
  if (AttentionRun run(c); base_tiles_where_not_default()(run.problem(), gpu_test::fa2_limits())) {
    SCOPED_TRACE("d256 on the base tiles");
    expect_forward_runs_bitwise_equal(c, Backend::Fa2, 100, gpu_test::fa2_fwd_with(base_tiles_where_not_default()));
  }
  // Decoding: pack-GQA rows, 64-row tiles with idle warps, split-KV and the combine.
  c = AttentionCase{.batch = 4, .seqlen_q = 1, .seqlen_k = 5000, .heads_q = 32, .heads_k = 8, .head_dim = 128,
                    .num_splits = 0};
  expect_forward_runs_bitwise_equal(c, Backend::Fa2, 100);
}

// A forced plan that cannot run the call is refused by name before any kernel writes an output.
TEST(Fa2ForwardPlans, PlansThatDoNotFitAreRefused) {
  SKIP_WITHOUT_CUDA_DEVICE();
  AttentionCase c;
  c.head_dim = 128;
  AttentionRun run(c);
  HostTensor out(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.dv()}), lse(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
  const FwdParams host = run.fwd_params(out.view(), lse.view(), Backend::Fa2);
  const fa2::FwdPlan plan = fa2::fwd_plan(run.problem(), gpu_test::fa2_limits());
  fa2::FwdPlan narrow = plan, unbuilt = plan, general = plan;
  narrow.head_dim = 64;  // below the call's
  unbuilt.warps = 8;
  general.general_score = true;
  for (const fa2::FwdPlan& bad : {narrow, unbuilt, general}) {
    const Status st = gpu_test::fwd_on_device_via(host, gpu_test::fa2_fwd_with([bad](const AttnProblem&, const fa2::DeviceLimits&) {
      return std::optional<fa2::FwdPlan>(bad);
    }));
    EXPECT_EQ(st.code(), ErrorCode::InvalidArgument) << st.message();
    EXPECT_EQ(st.argument(), "plan") << st.message();
    const auto* o = static_cast<const uint8_t*>(out.data());
    EXPECT_TRUE(std::all_of(o, o + out.numel() * 2, [](uint8_t x) { return x == 0xff; })) << "out was written";
  }
}

}  // namespace
}  // namespace flashattn::test
