// FA3 backward configurations of head dim 256 (calls with head dims 129..256 run here, d192
// padded): 64 query rows per step, 64 keys per CTA, the head dim split between the two consumer
// warpgroups (BwdConfig::kWide, bwd_consumer_wide.cuh).
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

template <typename Element>
Status bwd_hdim256_of(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (plan.general_score) return launch_bwd_config<BwdConfig<Element, 256, 64, true>>(args, stream);
  return launch_bwd_config<BwdConfig<Element, 256, 64, false>>(args, stream);
}

Status bwd_hdim256(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (!bwd_default_kernel(plan)) return bwd_hdim256_variants(args, plan, stream);
  return args.problem.fwd.dtype == DType::F16 ? bwd_hdim256_of<__half>(args, plan, stream) : bwd_hdim256_of<__nv_bfloat16>(args, plan, stream);
}

}  // namespace flashattn::fa3
