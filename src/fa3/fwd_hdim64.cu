// FA3 forward configurations of head dim 64 (calls with a head dim up to 64 run here).
// kBlockN 128 (FA3's d64 tile is 192 x 128 with three consumer warpgroups; not built here yet).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim64(const AttnProblem& p, cudaStream_t stream) {
  return p.dtype == DType::F16 ? launch_head_dim<__half, 64, 64, 128>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 64, 64, 128>(p, stream);
}

}  // namespace flashattn::fa3
