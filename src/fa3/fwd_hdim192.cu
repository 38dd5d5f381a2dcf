// FA3 forward configurations of head dim 192 (calls with a head dim up to 192 run here).
// head_dim_v 192: kBlockN 112 (O 96 registers, S 56, P 28; Q + two stages of K, V in 219 KiB of
// shared memory); softcap/ALiBi (more live values per element) take 96. head_dim_v <= 128: 128.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim192(const AttnProblem& p, cudaStream_t stream) {
  if (p.head_dim_v <= 128)
    return p.dtype == DType::F16 ? launch_head_dim<__half, 192, 128, 128>(p, stream)
                                 : launch_head_dim<__nv_bfloat16, 192, 128, 128>(p, stream);
  return p.dtype == DType::F16 ? launch_head_dim<__half, 192, 192, 112, 96>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 192, 192, 112, 96>(p, stream);
}

}  // namespace flashattn::fa3
