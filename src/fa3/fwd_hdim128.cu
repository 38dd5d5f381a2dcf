// FA3 forward configurations of head dim 128 (calls with a head dim of 65..128 run here).
// Unmasked: kBlockN 144 (S 72 registers, P 36, O 64: the widest tile without spills; fewer, longer
// GEMMs per key). Causal or windowed: 128, as FA3 does (a narrower tile wastes less on the diagonal).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim128(const AttnProblem& p, cudaStream_t stream) {
  const bool masked = p.mask.window_left >= 0 || p.mask.window_right >= 0;
  if (masked || fwd_tuning().d128_block_n == 128)
    return p.dtype == DType::F16 ? launch_head_dim<__half, 128, 128, 128>(p, stream)
                                 : launch_head_dim<__nv_bfloat16, 128, 128, 128>(p, stream);
  return p.dtype == DType::F16 ? launch_head_dim<__half, 128, 128, 144, 128>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 128, 128, 144, 128>(p, stream);
}

}  // namespace flashattn::fa3
