// FA3 backward configurations of head dim 64 (calls with head dims up to 64 run here): 64 query
// rows per step, 128 keys per CTA; the two consumer warpgroups split dQ = dS K by keys. (FA3's
// 128 x 128 spilled here: its S^T and dP^T tiles take 128 of the consumers' registers.)
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

template <typename Element>
Status bwd_hdim64_of(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (plan.general_score) return launch_bwd_config<BwdConfig<Element, 64, 64, true>>(args, stream);
  return launch_bwd_config<BwdConfig<Element, 64, 64, false>>(args, stream);
}

Status bwd_hdim64(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (!bwd_default_kernel(plan)) return bwd_hdim64_variants(args, plan, stream);
  return args.problem.fwd.dtype == DType::F16 ? bwd_hdim64_of<__half>(args, plan, stream) : bwd_hdim64_of<__nv_bfloat16>(args, plan, stream);
}

}  // namespace flashattn::fa3
