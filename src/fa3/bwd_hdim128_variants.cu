// FA3 backward kernels of head dim 128 that only a forced plan selects (bwd_variants.h: L2 hints),
// apart from bwd_hdim128.cu so that the default kernels build as before.
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim128_variants(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<128, kBwdVariants128>(args, plan, stream);
}

}  // namespace flashattn::fa3
