// FA3 forward configurations of head dim 128 (calls with a head dim of 65..128 run here).
// Unmasked: kBlockN 144 (S 72 registers, P 36, O 64: the widest tile without spills; fewer, longer
// GEMMs per key) when it pads the keys no more than 128 does (measured on the H200: 144 is 2 %
// faster at 8k-16k keys, 128 up to 12 % faster at 512-2k, where 144 pads the last tile).
// Causal or windowed: 128, as FA3 does (a narrower tile wastes less on the diagonal).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {
namespace {

bool wide_tile_pays(int64_t seqlen_k) {
  const int64_t padded_144 = (seqlen_k + 143) / 144 * 144, padded_128 = (seqlen_k + 127) / 128 * 128;
  return padded_144 * 100 <= padded_128 * 101;
}

}  // namespace

Status fwd_hdim128(const AttnProblem& p, cudaStream_t stream) {
  const bool masked = p.mask.window_left >= 0 || p.mask.window_right >= 0;
  const int block_n = fwd_tuning().d128_block_n != 0 ? fwd_tuning().d128_block_n : wide_tile_pays(p.lens.seqlen_k) ? 144 : 128;
  if (masked || block_n == 128)
    return p.dtype == DType::F16 ? launch_head_dim<__half, 128, 128, 128>(p, stream)
                                 : launch_head_dim<__nv_bfloat16, 128, 128, 128>(p, stream);
  return p.dtype == DType::F16 ? launch_head_dim<__half, 128, 128, 144, 128>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 128, 128, 144, 128>(p, stream);
}

}  // namespace flashattn::fa3
