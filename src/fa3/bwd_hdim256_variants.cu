// FA3 backward kernels of head dim 256 that only a forced plan selects (bwd_variants.h: the overlapped dQ slices and L2 hints),
// apart from bwd_hdim256.cu so that the default kernels build as before.
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim256_variants(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<256, kBwdVariants256>(args, plan, stream);
}

}  // namespace flashattn::fa3
