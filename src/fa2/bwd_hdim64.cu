// FA2 backward main kernels for padded head dim 64 (fp16, bf16; with and without dropout).
#include "fa2/bwd_main.cuh"

namespace flashattn::fa2 {
FLASHATTN_FA2_BWD_INSTANTIATE(__half, 64)
FLASHATTN_FA2_BWD_INSTANTIATE(__nv_bfloat16, 64)
}  // namespace flashattn::fa2
