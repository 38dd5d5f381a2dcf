// The FA2 forward kernels that pack the query heads of a KV head into rows for any seqlen_q
// (FwdPlan::pack_gqa_queries, kFwdPackedQueryKernels): their own translation unit, so they build
// alongside the others.
#include "fa2/fwd_launch.cuh"

namespace flashattn::fa2 {

Status launch_packed_query_plan(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream) {
  return fwd_launch::launch_from<kFwdPackedQueryKernels, true>(p, plan, limits, stream);
}

}  // namespace flashattn::fa2
