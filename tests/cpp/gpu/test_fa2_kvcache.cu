// FA2 fwd_kvcache (append + rotary + paged/dense cache + split-KV) and the device combine against
// the naive reference. Skips without a GPU.
#include <gtest/gtest.h>

#include "device_mirror.h"
#include "gpu_test_util.h"
#include "combine_case.h"
#include "kvcache_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

std::vector<KvCase> gpu_kv_cases() {
  std::vector<KvCase> cases;
  for (const KvCase& c : kv_cases())
    if (c.dtype != DType::F32) cases.push_back(c);  // the FA2 kernels take fp16/bf16
  return cases;
}

class Fa2KvCache : public ::testing::TestWithParam<KvCase> {};

TEST_P(Fa2KvCache, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_kvcache_case(GetParam(), Backend::Fa2, gpu_test::kvcache_on_device);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2KvCache, ::testing::ValuesIn(gpu_kv_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test

namespace flashattn::test {
namespace {

TEST(Fa2Combine, DenseFloat32) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_combine(false, DType::F32, Backend::Fa2, gpu_test::combine_on_device);
}
TEST(Fa2Combine, DenseBf16) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_combine(false, DType::BF16, Backend::Fa2, gpu_test::combine_on_device);
}
TEST(Fa2Combine, VarlenFp16) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_combine(true, DType::F16, Backend::Fa2, gpu_test::combine_on_device);
}

}  // namespace
}  // namespace flashattn::test
