// The combine's plan rules (fa2/combine_plan.h): the default, and which forced plans fit a call.
#include <gtest/gtest.h>

#include <string>

#include "fa2/combine_plan.h"

namespace flashattn::fa2 {
namespace {

CombineProblem aligned_problem(int64_t head_dim) {
  alignas(16) static float storage[16];
  CombineProblem c;
  c.splits = 3, c.batch = 2, c.seqlen = 5, c.heads = 4, c.head_dim = head_dim;
  c.out_partial = storage;
  c.out_partial_strides = {2 * 5 * 4 * head_dim, 5 * 4 * head_dim, 4 * head_dim, head_dim};
  return c;
}

TEST(CombinePlan, DefaultTakesFloat4WhereThePartialsAllowIt) {
  EXPECT_EQ(combine_plan(aligned_problem(128)).vector_width, 4);
  EXPECT_EQ(combine_plan(aligned_problem(6)).vector_width, 1);
  CombineProblem shifted = aligned_problem(128);
  shifted.out_partial += 1;
  EXPECT_EQ(combine_plan(shifted).vector_width, 1);
  for (int64_t d : {6, 8, 128})
    EXPECT_STREQ(combine_plan_misfit(combine_plan(aligned_problem(d)), aligned_problem(d)), "") << d;
}

TEST(CombinePlan, Float4NeedsAlignedRowsOfFourColumns) {
  const CombinePlan vec4{4};
  EXPECT_STREQ(combine_plan_misfit(vec4, aligned_problem(128)), "");
  EXPECT_STRNE(combine_plan_misfit(vec4, aligned_problem(6)), "");  // head dim not a multiple of 4
  CombineProblem shifted = aligned_problem(128);
  shifted.out_partial += 1;  // rows 4 bytes off 16-byte alignment
  EXPECT_STRNE(combine_plan_misfit(vec4, shifted), "");
  CombineProblem odd_stride = aligned_problem(128);
  odd_stride.out_partial_strides.row = 130;
  EXPECT_STRNE(combine_plan_misfit(vec4, odd_stride), "");
  EXPECT_STREQ(combine_plan_misfit({1}, shifted), "");
}

TEST(CombinePlan, RefusesWidthsTheKernelsLack) {
  EXPECT_STRNE(combine_plan_misfit({2}, aligned_problem(128)), "");
  EXPECT_STRNE(combine_plan_misfit({0}, aligned_problem(128)), "");
}

}  // namespace
}  // namespace flashattn::fa2
