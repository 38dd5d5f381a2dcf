// fwd_kvcache with cache_leftpad on the CPU backend (cases in leftpad_case.cpp).
#include <gtest/gtest.h>

#include "leftpad_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

class KvCacheLeftpad : public ::testing::TestWithParam<LeftpadCase> {};

TEST_P(KvCacheLeftpad, MatchesEachSequenceUnpadded) { check_leftpad_case(GetParam(), Backend::Cpu); }

INSTANTIATE_TEST_SUITE_P(Sweep, KvCacheLeftpad, ::testing::ValuesIn(leftpad_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test
