// FA3 fp8 forward kernels of head dim 64 (calls whose q/k/v head dims fall in its class): the
// tiles of fp8_fwd_tiles.h with this head dim, bfloat16 and float16 outputs.
#include "fa3/fp8_fwd_launch.cuh"

namespace flashattn::fa3 {

Status fp8_fwd_hdim64(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan) {
  return launch_fp8_head_dim<64>(p, stream, plan);
}

}  // namespace flashattn::fa3
