// FA2 backward main kernels for padded head dim 128 (fp16, bf16; with and without dropout).
#include "fa2/bwd_main.cuh"

namespace flashattn::fa2 {
FLASHATTN_FA2_BWD_INSTANTIATE(__half, 128)
FLASHATTN_FA2_BWD_INSTANTIATE(__nv_bfloat16, 128)
}  // namespace flashattn::fa2
