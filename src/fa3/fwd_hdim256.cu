// FA3 forward configurations of head dim 256 (calls with a head dim up to 256 run here).
// kBlockN 80: O takes 128 registers; Q (64 KiB) + two stages of K, V (160 KiB) fill the shared memory.
// Softcap/ALiBi (more live values per element) take 64.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim256(const AttnProblem& p, cudaStream_t stream) {
  return p.dtype == DType::F16 ? launch_head_dim<__half, 256, 256, 80, 64>(p, stream)
                               : launch_head_dim<__nv_bfloat16, 256, 256, 80, 64>(p, stream);
}

}  // namespace flashattn::fa3
