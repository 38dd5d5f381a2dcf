// How the kernel merges a split-KV call's partial outputs. Host code only, free of CUDA, so the
// rule is unit-tested on the CPU; tests and benchmarks may force a plan (fa2::combine).
#pragma once

#include <cstdint>

#include "common/kvcache_problem.h"

namespace flashattn::fa2 {

// One warp per output row; the split weights are computed once per 32 splits (a lane each) and
// broadcast by shuffles, so the loads of the partial outputs are independent of one another and
// several are in flight. (The kernel before it walked every split once per column with a
// dependent LSE load: half the batch-1 decode bandwidth, docs/PERF.md; deleted.)
struct CombinePlan {
  int vector_width = 1;  // columns per lane: 4 (float4 loads) or 1
};

// Whether the partial outputs can be read as float4: 16-byte aligned rows of a head dim that is
// a multiple of 4 elements.
inline bool combine_reads_float4(const CombineProblem& c) {
  const auto aligned = [](int64_t stride) { return stride % 4 == 0; };
  const CombineStrides& s = c.out_partial_strides;
  return c.head_dim % 4 == 0 && reinterpret_cast<uintptr_t>(c.out_partial) % 16 == 0 && aligned(s.split) &&
         aligned(s.batch) && aligned(s.row) && aligned(s.head);
}

// The default plan: float4 loads wherever the partials allow them.
inline CombinePlan combine_plan(const CombineProblem& c) { return {combine_reads_float4(c) ? 4 : 1}; }

// A forced plan, checked against the call: "" when it fits, else the reason.
inline const char* combine_plan_misfit(const CombinePlan& plan, const CombineProblem& c) {
  if (plan.vector_width != 1 && plan.vector_width != 4) return "vector_width must be 1 or 4";
  if (plan.vector_width == 4 && !combine_reads_float4(c))
    return "vector_width 4 needs a head dim that is a multiple of 4 and 16-byte aligned partial rows";
  return "";
}

}  // namespace flashattn::fa2
