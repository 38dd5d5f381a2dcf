// fwd_kvcache with left-padded caches and varlen queries on the CPU backend (cases in
// kv_alone_case.cpp).
#include <gtest/gtest.h>

#include "kv_alone_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

class KvCacheAlone : public ::testing::TestWithParam<KvAloneCase> {};

TEST_P(KvCacheAlone, MatchesEachSequenceAlone) { check_kv_alone_case(GetParam(), Backend::Cpu); }

INSTANTIATE_TEST_SUITE_P(Sweep, KvCacheAlone, ::testing::ValuesIn(kv_alone_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test
