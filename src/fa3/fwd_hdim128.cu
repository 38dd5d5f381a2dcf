// FA3 forward configurations of head dim 128 (calls with a head dim up to 128 run here).
// kBlockN 128: S (64 registers), P (32) and O (64) fit the consumers' 240 registers.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim128(const AttnProblem& p, cudaStream_t stream, bool pingpong) {
  return p.dtype == DType::F16 ? launch_head_dim<__half, 128, 128, 128>(p, stream, pingpong)
                               : launch_head_dim<__nv_bfloat16, 128, 128, 128>(p, stream, pingpong);
}

}  // namespace flashattn::fa3
