// FA3 forward configurations of head dim 64 (calls with a head dim up to 64 run here).
// Plain scores: three consumer warpgroups (160 registers each), 192 x 96 tiles: at d64 the GEMMs
// are short, and a third warpgroup keeps the tensor cores busy while the others do their softmax.
// FA3 runs 192 x 128 (192 x 192 unmasked); here 128 keys spill 136 bytes at 160 registers, 112
// spill 64, 96 none. Softcap/ALiBi: two consumer warpgroups, 128 x 128.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim64(const AttnProblem& p, cudaStream_t stream) {
  if (fwd_tuning().d64_consumers == 2)
    return p.dtype == DType::F16 ? launch_head_dim<__half, 64, 64, 128>(p, stream)
                                 : launch_head_dim<__nv_bfloat16, 64, 64, 128>(p, stream);
  return p.dtype == DType::F16 ? launch_head_dim<__half, 64, 64, 96, 128, 3>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 64, 64, 96, 128, 3>(p, stream);
}

}  // namespace flashattn::fa3
