// FA2 forward kernels against the naive reference (float64 and same-precision) over the feature
// sweep, plus a race check. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "attention_case.h"
#include "device_mirror.h"
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
}

}  // namespace
}  // namespace flashattn::test
