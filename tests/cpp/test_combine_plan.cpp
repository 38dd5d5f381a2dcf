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
  for (int warps : {0, 3, 16}) EXPECT_STRNE(combine_plan_misfit({4, warps}, aligned_problem(128)), "") << warps;
  for (int warps : {1, 2, 4, 8}) EXPECT_STREQ(combine_plan_misfit({4, warps}, aligned_problem(128)), "") << warps;
}

// A decode step of one sequence split many ways shares each row among warps (four splits each at
// least, 16 warps per multiprocessor at most); many rows, or few splits, keep a warp per row.
TEST(CombinePlan, WarpsPerRowFillTheGpuWithFewRows) {
  CombineProblem c = aligned_problem(128);
  c.batch = 1, c.seqlen = 1, c.heads = 32;
  c.splits = 42;
  EXPECT_EQ(combine_plan(c, 132).warps_per_row, 8);
  c.splits = 16;
  EXPECT_EQ(combine_plan(c, 132).warps_per_row, 4);
  c.splits = 7;
  EXPECT_EQ(combine_plan(c, 132).warps_per_row, 1);
  c.splits = 42;
  c.batch = 8;  // 256 rows: 1024 warps at four per row, 2048 at eight
  EXPECT_EQ(combine_plan(c, 132).warps_per_row, 8);
  c.batch = 64;  // 2048 rows
  EXPECT_EQ(combine_plan(c, 132).warps_per_row, 1);
  EXPECT_EQ(combine_plan(c).warps_per_row, 1);  // no device: one warp per row
}

}  // namespace
}  // namespace flashattn::fa2
