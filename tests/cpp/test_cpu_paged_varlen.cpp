// fwd with varlen queries over a paged k/v on the CPU backend (cases in paged_varlen_case.cpp).
#include <gtest/gtest.h>

#include "paged_varlen_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

class PagedVarlen : public ::testing::TestWithParam<PagedVarlenCase> {};

TEST_P(PagedVarlen, MatchesPackedReference) {
  const PagedVarlenCase& c = GetParam();
  const FwdResult f = check_paged_varlen_case(c, Backend::Cpu);
  expect_within(f.out, 2.0, rounding_floor(c.attn.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

INSTANTIATE_TEST_SUITE_P(Sweep, PagedVarlen, ::testing::ValuesIn(paged_varlen_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test
