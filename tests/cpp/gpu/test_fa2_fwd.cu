// FA2 forward kernels against the naive reference (float64 and same-precision) over the feature
// sweep, plus a race check. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "attention_case.h"
#include "device_mirror.h"
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

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2Forward, ::testing::ValuesIn(gpu_sweep()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return param_test_name(info.index, info.param.name());
                         });

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
  AttentionRun run(c);
  HostTensor out(c.dtype, {2, 1000, 8, 128}), lse(DType::F32, {2, 8, 1000});
  gpu_test::DeviceMirror m;
  FwdParams d = run.fwd_params(out.view(), lse.view(), Backend::Fa2);
  d.q = m.upload(d.q);
  d.k = m.upload(d.k);
  d.v = m.upload(d.v);
  d.out = m.output(d.out);
  d.softmax_lse = m.output(d.softmax_lse);
  std::vector<uint8_t> first_out, first_lse;
  for (int rep = 0; rep < 100; ++rep) {
    CUDA_CHECK(cudaMemset(d.out.data, 0xff, size_t(out.numel()) * 2));
    ASSERT_TRUE(fwd(d).ok());
    m.download();
    std::vector<uint8_t> o(static_cast<const uint8_t*>(out.data()), static_cast<const uint8_t*>(out.data()) + out.numel() * 2);
    std::vector<uint8_t> l(static_cast<const uint8_t*>(lse.data()), static_cast<const uint8_t*>(lse.data()) + lse.numel() * 4);
    if (rep == 0) {
      first_out = o;
      first_lse = l;
      continue;
    }
    ASSERT_EQ(first_out, o) << "run " << rep;
    ASSERT_EQ(first_lse, l) << "run " << rep;
  }
}

}  // namespace
}  // namespace flashattn::test
