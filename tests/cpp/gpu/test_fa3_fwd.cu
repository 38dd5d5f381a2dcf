// FA3 forward (d 64/128, dense and varlen) against the naive reference over the part of the feature
// sweep it supports. Skips without an sm90 GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "attention_case.h"
#include "device_mirror.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

std::vector<AttentionCase> fa3_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : feature_sweep())
    if (c.dtype != DType::F32 && c.dropout_p == 0.f && c.num_splits <= 1 &&
        (c.head_dim == 64 || c.head_dim == 128) && c.dv() == c.head_dim)
      cases.push_back(c);
  return cases;
}

class Fa3Forward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa3Forward, MatchesReference) {
  SKIP_WITHOUT_SM90();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  const FwdResult f = run.check_fwd(Backend::Fa3, gpu_test::fwd_on_device);
  expect_within(f.out, 2.0, rounding_floor(c.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa3Forward, ::testing::ValuesIn(fa3_sweep()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return param_test_name(info.index, info.param.name());
                         });

}  // namespace
}  // namespace flashattn::test
