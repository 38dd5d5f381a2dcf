// stmatrix (sm90): four 8x8 matrices of 16-bit elements from registers into shared memory, the
// inverse of ldmatrix (arch/sm80/ldmatrix.cuh). Lanes 8i..8i+7 give the row addresses of matrix i
// (16 bytes each, 16-byte aligned); register i of a lane holds row lane/4, columns 2(lane%4)..+1
// of matrix i, i.e. bytes 4 (lane % 4) .. + 3 of that row.
#pragma once

#include <cstdint>

namespace flashattn::sm90 {

__device__ __forceinline__ void stmatrix_x4(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0), "r"(r1), "r"(r2),
               "r"(r3)
               : "memory");
}

// The transposing forms: register i of a lane still holds row lane/4, columns 2(lane%4)..+1 of
// matrix i, and the row whose address lane 8i + j gives receives column j of matrix i. x2: lanes
// 0..15 give the addresses.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0), "r"(r1), "r"(r2),
               "r"(r3)
               : "memory");
}
__device__ __forceinline__ void stmatrix_x2_trans(uint32_t address, uint32_t r0, uint32_t r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(address), "r"(r0), "r"(r1) : "memory");
}

}  // namespace flashattn::sm90
