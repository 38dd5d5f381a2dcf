// The tiled CPU path against the naive reference over the shape and feature sweep, forward and
// backward, with the project's tolerance rule (attention_case.h).
#include <gtest/gtest.h>

#include <cmath>

#include "attention_case.h"

namespace flashattn::test {
namespace {

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

class TiledVsReference : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(TiledVsReference, ForwardAndBackward) { check_case(GetParam(), /*backward=*/true); }

INSTANTIATE_TEST_SUITE_P(Sweep, TiledVsReference, ::testing::ValuesIn(feature_sweep()), ParamTestName());

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
  ASSERT_TRUE(set_cpu_threads(1).ok());
  run.check_fwd(Backend::Cpu);
  const std::vector<float> one = run.out.to_float();
  ASSERT_TRUE(set_cpu_threads(0).ok());
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
