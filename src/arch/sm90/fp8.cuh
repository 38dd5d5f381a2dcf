// fp8 (e4m3) pieces of the sm90 layer: K-major shared-memory descriptors for the 128-, 64- and
// 32-byte swizzles (an 8-bit row of a swizzle atom holds 128, 64 or 32 elements), float -> e4m3
// conversion, and the wgmma accumulators of an m64nN tile packed as the register A operand of an
// m64nNk32 e4m3 wgmma whose K dimension is the tile's N.
//
// The accumulator -> A-fragment order. Accumulator 4i + e of a thread holds row g + 8 (e / 2) and
// column 8i + 2 q + e % 2 (g = lane / 4, q = lane % 4, rows within the warp's 16). The k32 A
// fragment of register r holds row g + 8 (r % 2) and the K positions 16 (r / 2) + 4 q + b for
// bytes b = 0..3. A thread holds, within each 16-column group, columns 2q, 2q + 1, 2q + 8, 2q + 9
// of its rows: exactly the four columns its A register needs, once K position 4q + b is taken to
// mean column kmajor_p_column(4q + b) = 2q + b % 2 + 8 (b / 2). So the accumulators pack into the
// A fragments without moving between threads, and the B operand (V transposed, transpose_fp8.cuh)
// stores its keys in the same permuted order within each 16-key group.
#pragma once

#include <cstdint>

#include "arch/sm90/wgmma.cuh"
#include "common/host_device.h"

namespace flashattn::sm90 {

// K-major operand of 8-bit elements with a kSwizzleBytes swizzle (128, 64 or 32), starting where
// this k32 step starts: rows of kSwizzleBytes, 8-row atoms kSwizzleBytes * 8 apart (the stride
// byte offset); atoms aligned to their own size. The leading offset is unused for swizzled
// K-major layouts. Descriptor bits [62, 64): 1 = 128-byte, 2 = 64-byte, 3 = 32-byte swizzle.
template <int kSwizzleBytes>
__device__ __forceinline__ uint64_t kmajor_descriptor_sw(uint32_t smem_addr) {
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64 || kSwizzleBytes == 32, "swizzle of 128, 64 or 32 bytes");
  constexpr uint64_t kMode = kSwizzleBytes == 128 ? 1 : kSwizzleBytes == 64 ? 2 : 3;
  return uint64_t((smem_addr & 0x3ffffu) >> 4) | (uint64_t(1) << 16) | (uint64_t((8 * kSwizzleBytes) >> 4) << 32) |
         (kMode << 62);
}

// The column of a tile (within its 16-column group) that K position `position` (0..15) of the
// fp8 A fragment stands for (see the top of this file); the B operand's keys are stored in this
// order. Host and device: tests and the transposing pass use the same map.
FA_HD constexpr int kmajor_p_column(int position) {
  const int q = (position % 16) / 4, b = position % 4;
  return (position / 16) * 16 + 2 * q + b % 2 + 8 * (b / 2);
}

// Two floats as two e4m3 bytes, `lo` in the low byte: round to nearest even, saturating to
// +-448 (NaN stays NaN). The instruction puts its first source in the upper byte.
__device__ __forceinline__ uint16_t cvt_e4m3x2(float lo, float hi) {
  uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

// Four floats as four e4m3 bytes, b0 in the low byte.
__device__ __forceinline__ uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  return uint32_t(cvt_e4m3x2(b0, b1)) | (uint32_t(cvt_e4m3x2(b2, b3)) << 16);
}

// Accumulators of an m64nN tile (kRegs = N / 2) as the register A operand of an e4m3 wgmma with
// K = N: k32 step kk is accumulators 16 kk .. 16 kk + 15; register r takes accumulator pairs
// (4i + 2 (r % 2), + 1) for i = 4 kk + 2 (r / 2) and i + 1 (see the top of this file).
template <int kRegs>
__device__ __forceinline__ void pack_fragments_e4m3(uint32_t (&frag)[kRegs / 16][4], const float (&acc)[kRegs]) {
  static_assert(kRegs % 16 == 0, "K steps of 32 columns");
#pragma unroll
  for (int kk = 0; kk < kRegs / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 4 * kk + 2 * (r / 2), half = r % 2;
      const float* a = acc + 4 * i + 2 * half;
      frag[kk][r] = pack_e4m3x4(a[0], a[1], a[4], a[5]);
    }
}

}  // namespace flashattn::sm90
