// FA3 forward (head dims up to 256, dense and varlen) against the naive reference over the part of the feature
// sweep it supports. Skips without an sm90 GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "attention_case.h"
#include "device_mirror.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

// The head-dim pairs the FA3 forward runs: both in one size class (<= 64, <= 128, <= 192, <= 256),
// or <= 192 with a value head dim <= 128.
bool fa3_head_dims(int d, int dv) {
  auto size_class = [](int x) { return (x + 63) / 64; };
  return size_class(d) == size_class(dv) || (size_class(d) == 3 && size_class(dv) == 2);
}

std::vector<AttentionCase> fa3_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : feature_sweep())
    if (c.dtype != DType::F32 && c.dropout_p == 0.f && c.num_splits <= 1 && fa3_head_dims(c.head_dim, c.dv()))
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
