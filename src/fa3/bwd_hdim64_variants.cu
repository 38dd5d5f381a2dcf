// FA3 backward kernels of head dim 64 that only a forced plan selects (bwd_variants.h: the alternate dQ and L2 hints),
// apart from bwd_hdim64.cu so that the default kernels build as before.
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim64_variants(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<64, kBwdVariants64>(args, plan, stream);
}

}  // namespace flashattn::fa3
