// The FA2 backend (mma.sync kernels, sm80+). Compiled only when the library is built with CUDA.
#pragma once

#include "common/kvcache_problem.h"
#include "common/problem.h"
#include "fa2/bwd_plan.h"
#include "fa2/combine_plan.h"
#include "fa2/fwd_plan.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// Forward over device tensors, enqueued on `stream` (a cudaStream_t); num_splits: 1 = one pass,
// > 1 = split-KV with that many splits, 0 = split only when the row blocks cannot fill the GPU.
// `plan` forces a kernel (tests, benchmarks; null: fwd_plan's for the current device); a plan that
// cannot run the call answers an error (check_fwd_plan).
Status fwd(const AttnProblem& problem, void* stream, const FwdPlan* plan = nullptr);
// Backward over device tensors, enqueued on `stream`; workspaces are stream-ordered allocations.
// `plan` forces a kernel (null: bwd_plan's for the current device), checked by check_bwd_plan.
Status bwd(const BwdProblem& problem, void* stream, const BwdPlan* plan = nullptr);
// Merges split-KV partials (float32) into out and lse on the device; forced_plan: the kernel
// (null: combine_plan's).
Status combine(const CombineProblem& problem, void* stream, const CombinePlan* forced_plan = nullptr);
// Rotary + append of k_new/v_new into the (dense or paged) cache, rotary on q, then fwd over the
// cache (split over keys when the rows alone do not fill the GPU), with `plan` as fwd takes it.
Status fwd_kvcache(const KvCacheProblem& problem, void* stream, const FwdPlan* plan = nullptr);

}  // namespace flashattn::fa2
