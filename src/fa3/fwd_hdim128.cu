// FA3 forward configurations of head dim 128 (calls with a head dim of 65..128 run here).
// Unmasked: kBlockN 144 (S 72 registers, P 36, O 64: the widest tile without spills; fewer, longer
// GEMMs per key) unless it pads the keys 2 % more than 128 does (H200, same run: 144 is 1.6 %
// faster at 4k keys and 1-2 % at 8k-16k; 128 is 8-10 % faster at 512-1k, where 144 pads the last
// tile by 12 %). Causal or windowed: 128, as FA3 does (a narrower tile wastes less on the diagonal).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim128(const AttnProblem& p, cudaStream_t stream) {
  int block_n = fwd_tuning().d128_block_n;
  if (block_n == 0) block_n = pads_at_most(1, p.lens.seqlen_k, 1, 144, 1, 128, 0.02) ? 144 : 128;
  const bool f16 = p.dtype == DType::F16;
  if (p.mask.limits_keys() || block_n == 128)
    return f16 ? launch_head_dim<__half, 128, 128, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 128>(p, stream);
  if (block_n == 176)
    return f16 ? launch_head_dim<__half, 128, 128, 176, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 176, 128>(p, stream);
  if (block_n == 160)
    return f16 ? launch_head_dim<__half, 128, 128, 160, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 160, 128>(p, stream);
  return f16 ? launch_head_dim<__half, 128, 128, 144, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 144, 128>(p, stream);
}

}  // namespace flashattn::fa3
