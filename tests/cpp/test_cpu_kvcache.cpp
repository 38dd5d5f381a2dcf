// fwd_kvcache on the CPU backend against the naive reference (cases in kvcache_case.cpp).
#include <gtest/gtest.h>

#include "kvcache_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

class KvCacheVsReference : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvCacheVsReference, Matches) { check_kvcache_case(GetParam(), Backend::Cpu); }

INSTANTIATE_TEST_SUITE_P(Sweep, KvCacheVsReference, ::testing::ValuesIn(kv_cases()), ParamTestName());
INSTANTIATE_TEST_SUITE_P(Speculative, KvCacheVsReference, ::testing::ValuesIn(speculative_kv_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test
