// How the kernel merges a split-KV call's partial outputs. Host code only, free of CUDA, so the
// rule is unit-tested on the CPU; tests and benchmarks may force a plan (fa2::combine).
#pragma once

#include <cstdint>

#include "common/kvcache_problem.h"

namespace flashattn::fa2 {

// Each output row is merged by warps_per_row warps (1, 2, 4 or 8) of one block, each taking every
// warps_per_row-th split; per chunk of 32 of a warp's splits, the weights are computed once (a
// lane each) and broadcast by shuffles, so the loads of the partial outputs are independent of one
// another and several are in flight. (The kernel before it walked every split once per column
// with a dependent LSE load: half the batch-1 decode bandwidth, docs/PERF.md; deleted.)
struct CombinePlan {
  int vector_width = 1;   // columns per lane: 4 (float4 loads) or 1
  int warps_per_row = 1;
};

// Whether the partial outputs can be read as float4: 16-byte aligned rows of a head dim that is
// a multiple of 4 elements.
inline bool combine_reads_float4(const CombineProblem& c) {
  const auto aligned = [](int64_t stride) { return stride % 4 == 0; };
  const CombineStrides& s = c.out_partial_strides;
  return c.head_dim % 4 == 0 && reinterpret_cast<uintptr_t>(c.out_partial) % 16 == 0 && aligned(s.split) &&
         aligned(s.batch) && aligned(s.row) && aligned(s.head);
}

// Warps per row: one, unless the rows are too few to fill the GPU with a warp each (a decode step
// of a few sequences split many ways): then up to eight warps share a row, each with at least four
// of its splits, while the call's warps stay within 16 per multiprocessor.
inline int combine_warps_per_row(const CombineProblem& c, int multiprocessors) {
  const int64_t rows = c.batch * c.seqlen * c.heads;
  int warps = 1;
  while (warps < 8 && rows * 2 * warps <= int64_t(multiprocessors) * 16 && c.splits >= 4 * 2 * warps) warps *= 2;
  return warps;
}

// The default plan: float4 loads wherever the partials allow them; warps per row by the rows and
// splits of the call on a GPU of this many multiprocessors (0: one warp per row).
inline CombinePlan combine_plan(const CombineProblem& c, int multiprocessors = 0) {
  return {combine_reads_float4(c) ? 4 : 1, combine_warps_per_row(c, multiprocessors)};
}

// A forced plan, checked against the call: "" when it fits, else the reason.
inline const char* combine_plan_misfit(const CombinePlan& plan, const CombineProblem& c) {
  if (plan.vector_width != 1 && plan.vector_width != 4) return "vector_width must be 1 or 4";
  if (plan.vector_width == 4 && !combine_reads_float4(c))
    return "vector_width 4 needs a head dim that is a multiple of 4 and 16-byte aligned partial rows";
  if (plan.warps_per_row != 1 && plan.warps_per_row != 2 && plan.warps_per_row != 4 && plan.warps_per_row != 8)
    return "warps_per_row must be 1, 2, 4 or 8";
  return "";
}

}  // namespace flashattn::fa2
