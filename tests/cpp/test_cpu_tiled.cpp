// The tiled CPU path against the naive reference over the shape and feature sweep, forward and
// backward, with the project's tolerance rule (attention_case.h).
#include <gtest/gtest.h>

#include <cmath>

#include "attention_case.h"

namespace flashattn::test {
namespace {

// The floor covers the final rounding of an output to its dtype: one unit in the last place at
// the output's magnitude.
double rounding_floor(DType dtype, double magnitude) {
  const double eps = dtype == DType::BF16 ? 0x1p-8 : dtype == DType::F16 ? 0x1p-11 : 0x1p-22;
  return eps * std::max(1.0, magnitude);
}

void check_case(const AttentionCase& c, bool backward) {
  SCOPED_TRACE(c.name());
  AttentionRun run(c);
  const FwdResult f = run.check_fwd(Backend::Cpu);
  expect_within(f.out, 2.0, rounding_floor(c.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
  if (!backward) return;
  const BwdResult b = run.check_bwd(Backend::Cpu);
  expect_within(b.dq, 2.0, rounding_floor(c.dtype, b.dq.reference_max), "dq");
  expect_within(b.dk, 2.0, rounding_floor(c.dtype, b.dk.reference_max), "dk");
  expect_within(b.dv, 2.0, rounding_floor(c.dtype, b.dv.reference_max), "dv");
}

std::vector<AttentionCase> sweep() {
  std::vector<AttentionCase> cases;
  auto add = [&](AttentionCase c) {
    c.seed = cases.size() + 1;
    cases.push_back(c);
  };
  // Sequence lengths that break kernels: 1, odd, ragged tails, sk < sq, off-by-one around 1024.
  const std::pair<int, int> lengths[] = {{1, 1},     {1, 17},     {17, 17},   {17, 1},    {113, 203},
                                         {203, 113}, {127, 513},  {64, 128},  {128, 64},  {1023, 1024},
                                         {1024, 1023}};
  for (auto [sq, sk] : lengths)
    for (bool causal : {false, true}) {
      AttentionCase c;
      c.seqlen_q = sq;
      c.seqlen_k = sk;
      c.causal = causal;
      const bool big = int64_t(sq) * sk > 100000;
      c.batch = big ? 1 : 2;
      c.heads_q = c.heads_k = big ? 1 : 2;
      add(c);
    }
  // Head dims, including odd multiples of 8, and a distinct value head dim.
  for (int d : {8, 32, 40, 64, 72, 96, 128, 136, 160, 192, 200, 224, 256}) {
    AttentionCase c;
    c.head_dim = d;
    c.seqlen_q = 77;
    c.seqlen_k = 150;
    c.causal = d % 16 == 0;
    add(c);
  }
  {
    AttentionCase c;
    c.head_dim = 128;
    c.head_dim_v = 64;
    c.seqlen_q = c.seqlen_k = 90;
    add(c);
  }
  // Dtypes.
  for (DType dt : {DType::F16, DType::F32}) {
    AttentionCase c;
    c.dtype = dt;
    c.seqlen_q = 100;
    c.seqlen_k = 140;
    add(c);
    c.causal = true;
    add(c);
  }
  // MHA / GQA / MQA.
  for (auto [hq, hk] : {std::pair{6, 6}, std::pair{6, 2}, std::pair{6, 1}, std::pair{8, 2}}) {
    AttentionCase c;
    c.batch = 3;
    c.heads_q = hq;
    c.heads_k = hk;
    c.seqlen_q = 70;
    c.seqlen_k = 130;
    c.causal = hk == 2;
    add(c);
  }
  // Every feature alone, and in pairs.
  AttentionCase base;
  base.seqlen_q = 96;
  base.seqlen_k = 160;
  base.heads_q = 4;
  base.heads_k = 2;
  auto with = [&](auto f) {
    AttentionCase c = base;
    f(c);
    add(c);
  };
  with([](AttentionCase& c) { c.window_left = 20; c.window_right = 10; });
  with([](AttentionCase& c) { c.window_left = 0; c.window_right = 0; });
  with([](AttentionCase& c) { c.window_left = 33; });
  with([](AttentionCase& c) { c.window_right = 5; });
  with([](AttentionCase& c) { c.causal = true; c.window_left = 40; });
  with([](AttentionCase& c) { c.softcap = 1.5f; });
  with([](AttentionCase& c) { c.softcap = 1.5f; c.causal = true; });
  with([](AttentionCase& c) { c.alibi = 1; });
  with([](AttentionCase& c) { c.alibi = 2; c.causal = true; });
  with([](AttentionCase& c) { c.alibi = 1; c.softcap = 2.f; });
  with([](AttentionCase& c) { c.dropout_p = 0.17f; });
  with([](AttentionCase& c) { c.dropout_p = 0.3f; c.causal = true; });
  with([](AttentionCase& c) { c.dropout_p = 0.1f; c.softcap = 2.f; c.alibi = 1; });
  with([](AttentionCase& c) { c.dropout_p = 0.2f; c.window_left = 30; c.window_right = 30; });
  with([](AttentionCase& c) { c.seqused_k = {100, 37}; });
  with([](AttentionCase& c) { c.seqused_k = {0, 160}; c.causal = true; });
  with([](AttentionCase& c) { c.num_splits = 3; });
  with([](AttentionCase& c) { c.num_splits = 4; c.causal = true; c.alibi = 1; });
  with([](AttentionCase& c) { c.num_splits = 0; c.seqlen_q = 1; c.seqlen_k = 700; });
  with([](AttentionCase& c) { c.num_splits = 16; c.seqlen_k = 64; c.softcap = 1.f; });  // empty splits
  // Varlen batches, with empty sequences on either side.
  with([](AttentionCase& c) { c.varlen_q = {30, 0, 77, 1}; c.varlen_k = {50, 12, 77, 0}; });
  with([](AttentionCase& c) { c.varlen_q = {30, 5, 77, 64}; c.varlen_k = {20, 0, 90, 64}; c.causal = true; });
  with([](AttentionCase& c) {
    c.varlen_q = {65, 17, 130};
    c.varlen_k = {65, 200, 3};
    c.window_left = 16;
    c.window_right = 0;
    c.dropout_p = 0.1f;
  });
  with([](AttentionCase& c) { c.varlen_q = {40, 70}; c.varlen_k = {60, 90}; c.seqused_k = {45, 90}; c.alibi = 2; });
  with([](AttentionCase& c) { c.varlen_q = {1, 1, 1}; c.varlen_k = {300, 5, 129}; c.num_splits = 0; });
  return cases;
}

class TiledVsReference : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(TiledVsReference, ForwardAndBackward) { check_case(GetParam(), /*backward=*/true); }

INSTANTIATE_TEST_SUITE_P(Sweep, TiledVsReference, ::testing::ValuesIn(sweep()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return param_test_name(info.index, info.param.name());
                         });

// Bitwise reproducibility: the CPU backward owns every output element in one work item.
TEST(TiledBackward, DeterministicAcrossRuns) {
  AttentionCase c;
  c.seqlen_q = 300;
  c.seqlen_k = 260;
  c.heads_q = 4;
  c.heads_k = 1;
  c.causal = true;
  c.dropout_p = 0.1f;
  AttentionRun run(c);
  run.check_fwd(Backend::Cpu);
  std::vector<float> first;
  for (int rep = 0; rep < 5; ++rep) {
    HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
    BwdParams p = run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Cpu);
    p.deterministic = true;
    ASSERT_TRUE(bwd(p).ok());
    std::vector<float> all = dq.to_float();
    for (float x : dk.to_float()) all.push_back(x);
    for (float x : dv.to_float()) all.push_back(x);
    if (rep == 0) {
      first = all;
      continue;
    }
    ASSERT_EQ(0, std::memcmp(first.data(), all.data(), first.size() * sizeof(float))) << "run " << rep;
  }
}

// The same call with different thread counts gives the same bits (work split does not change
// the arithmetic).
TEST(TiledForward, ThreadCountDoesNotChangeResult) {
  AttentionCase c;
  c.seqlen_q = 200;
  c.seqlen_k = 333;
  c.causal = true;
  AttentionRun run(c);
  set_cpu_threads(1);
  run.check_fwd(Backend::Cpu);
  const std::vector<float> one = run.out.to_float();
  set_cpu_threads(0);
  run.check_fwd(Backend::Cpu);
  const std::vector<float> all = run.out.to_float();
  EXPECT_EQ(0, std::memcmp(one.data(), all.data(), one.size() * sizeof(float)));
}

// O(N) memory: the tiled forward and backward never allocate anything near seqlen_q x seqlen_k.
TEST(TiledMemory, WorkspaceIsLinearInSeqlen) {
  AttentionCase c;
  c.batch = 1;
  c.heads_q = c.heads_k = 1;
  c.seqlen_q = c.seqlen_k = 4096;
  c.head_dim = 64;
  AttentionRun run(c);
  HostTensor out(c.dtype, {1, 4096, 1, 64}), lse(DType::F32, {1, 1, 4096});
  reset_cpu_workspace_peak();
  const size_t before = cpu_workspace_stats().current_bytes;
  ASSERT_TRUE(fwd(run.fwd_params(out.view(), lse.view(), Backend::Cpu)).ok());
  const size_t fwd_peak = cpu_workspace_stats().peak_bytes - before;
  const size_t score_matrix = size_t(4096) * 4096 * sizeof(float);
  EXPECT_LT(fwd_peak, score_matrix / 16) << "forward scratch " << fwd_peak << " bytes";
  EXPECT_EQ(cpu_workspace_stats().current_bytes, before) << "scratch leaked";

  run.out = std::move(out);
  run.lse = std::move(lse);
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  reset_cpu_workspace_peak();
  ASSERT_TRUE(bwd(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Cpu)).ok());
  const size_t bwd_peak = cpu_workspace_stats().peak_bytes - before;
  EXPECT_LT(bwd_peak, score_matrix / 16) << "backward scratch " << bwd_peak << " bytes";
}

}  // namespace
}  // namespace flashattn::test
