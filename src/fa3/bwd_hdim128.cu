// FA3 backward configurations of head dim 128 (calls with head dims 65..128 run here): 64 query
// rows per step, 128 keys per CTA (FA3's causal d128 tile).
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

template <typename Element>
Status bwd_hdim128_of(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (plan.general_score) return launch_bwd_config<BwdConfig<Element, 128, 64, true>>(args, stream);
  return launch_bwd_config<BwdConfig<Element, 128, 64, false>>(args, stream);
}

Status bwd_hdim128(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (!bwd_default_kernel(plan)) return bwd_hdim128_variants(args, plan, stream);
  return args.problem.fwd.dtype == DType::F16 ? bwd_hdim128_of<__half>(args, plan, stream) : bwd_hdim128_of<__nv_bfloat16>(args, plan, stream);
}

}  // namespace flashattn::fa3
