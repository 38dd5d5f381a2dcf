// FA3 backward configurations of head dim 128 (calls with head dims 65..128 run here): 64 query
// rows per step, 128 keys per CTA (FA3's causal d128 tile).
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim128(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<128, kBwdKernels128>(args, plan, stream);
}

}  // namespace flashattn::fa3
