// FA3 forward configurations of head dim 64 (calls with a head dim up to 64 run here).
// Plain scores: three consumer warpgroups (160 registers each) with 192-row tiles, as FA3 runs,
// unless that pads the problem 7 % more than 128 x 128 does; then two (240 registers), 128 x 128.
// At d64 the GEMMs are short, and a third warpgroup keeps the tensor cores busy while the others
// do their softmax. Keys per tile on three warpgroups: 192 with P through shared memory for calls
// without causal or window limits, from 2k keys when it pads the keys at most 4 % more than 128
// (FA3's unmasked d64 tile; H200, same run: +2/+5/+9/+6 % at 2k/4k/8k/16k over 192 x 128, -9 to
// -11 % at 512-1k, where it pads 12.5 %); else 128. Earlier, same GPU: 192 x 96 was +7 % over
// 128 x 128 at 8k-16k, -14 % at 512; 192 x 128 +7-10 % over 192 x 96 at 2k-16k, causal +3-6 %
// (it fits 160 registers since masked tiles wait for P V before masking, fwd_kernel.cuh).
// Softcap/ALiBi: two consumer warpgroups, 128 x 128.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim64(const AttnProblem& p, cudaStream_t stream) {
  int consumers = fwd_tuning().d64_consumers;
  if (consumers == 0) consumers = pads_at_most(p.lens.seqlen_q, p.lens.seqlen_k, 192, 128, 128, 128, 0.07) ? 3 : 2;
  int block_n = fwd_tuning().d64_block_n;
  if (block_n == 0) block_n = p.lens.seqlen_k >= 2048 && pads_at_most(1, p.lens.seqlen_k, 1, 192, 1, 128, 0.04) ? 192 : 128;
  if (consumers == 3 && block_n == 192 && !p.mask.limits_keys())
    return p.dtype == DType::F16 ? launch_head_dim<__half, 64, 64, 192, 128, 3, true>(p, stream)
                                 : launch_head_dim<__nv_bfloat16, 64, 64, 192, 128, 3, true>(p, stream);
  if (consumers == 2)
    return p.dtype == DType::F16 ? launch_head_dim<__half, 64, 64, 128>(p, stream)
                                 : launch_head_dim<__nv_bfloat16, 64, 64, 128>(p, stream);
  return p.dtype == DType::F16 ? launch_head_dim<__half, 64, 64, 128, 128, 3>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 64, 64, 128, 128, 3>(p, stream);
}

}  // namespace flashattn::fa3
