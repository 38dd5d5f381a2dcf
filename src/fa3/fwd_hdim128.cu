// FA3 forward configurations of head dim 128 (calls with a head dim of 65..128 run here).
// Unmasked: kBlockN 176 (S 88 registers, P 44, O 64: fewer, longer GEMMs per key; FA3's tile) from
// 1k keys when it pads the keys at most 4 % more than 128 does, else 144 when that pads at most 2 %
// more, else 128. H200, same run: 176 is +4-6 % over 144 at 2k-16k keys, equal at 1k, -5 % at
// 512 (three key tiles); 144 was +1-2 % over 128 at 4k-16k and 128 +8-10 % at 512-1k (where 144
// pads by 12 %). Causal or windowed: 128, as FA3 does (a narrower tile wastes less on the diagonal).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim128(const AttnProblem& p, cudaStream_t stream) {
  int block_n = fwd_tuning().d128_block_n;
  const int64_t sk = p.lens.seqlen_k;
  if (block_n == 0) block_n = sk >= 1024 && pads_at_most(1, sk, 1, 176, 1, 128, 0.04) ? 176
                              : pads_at_most(1, sk, 1, 144, 1, 128, 0.02)            ? 144
                                                                                      : 128;
  const bool f16 = p.dtype == DType::F16;
  if (p.mask.limits_keys() || block_n == 128)
    return f16 ? launch_head_dim<__half, 128, 128, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 128>(p, stream);
  if (block_n == 176)
    return f16 ? launch_head_dim<__half, 128, 128, 176, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 176, 128>(p, stream);
  return f16 ? launch_head_dim<__half, 128, 128, 144, 128>(p, stream) : launch_head_dim<__nv_bfloat16, 128, 128, 144, 128>(p, stream);
}

}  // namespace flashattn::fa3
