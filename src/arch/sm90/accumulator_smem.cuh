// wgmma accumulators of a 64-row tile to shared memory, as a K-major tile in the 128-byte swizzle
// (what a TMA store or an SS wgmma reads): column blocks of 64 elements, rows of 128 bytes.
#pragma once

#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/wgmma.cuh"

namespace flashattn::sm90 {

// Thread (warp, lane) of the warpgroup holds accumulator pair (4i + 2 half, + 1) of row
// 16 warp + lane / 4 + 8 half, columns 8i + 2 (lane % 4) + {0, 1}: 16-byte chunk i % 8 of the
// row's 128 bytes in column block i / 8, XORed with the row's low three bits (= lane / 4) by the
// swizzle, so each store instruction hits 32 distinct banks. One base register: the row, the
// swizzle's XOR term (lane / 4) * 16 and the lane's 4 bytes; chunk i % 8 is then one XOR with a
// constant (bits 4-6 only), the column block and the row + 8 half constant offsets. `tile` is
// 1024-byte aligned (the swizzle's period); column blocks are kBlockBytes apart (64 rows: 8192;
// a taller tile whose rows these 64 are). Row half h is multiplied by scale[h] when kScaled.
template <typename Element, int kColumns, bool kScaled, int kBlockBytes = 64 * 128>
__device__ __forceinline__ void store_accumulators_sw128(uint32_t tile, const float* acc, const float (&scale)[2], int warp, int lane) {
  const uint32_t base = opaque_u32(tile + uint32_t(16 * warp + lane / 4) * 128 + (lane / 4) * 16 + (lane % 4) * 4);
#pragma unroll
  for (int i = 0; i < kColumns / 8; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t addr = (base ^ uint32_t((i % 8) * 16)) + (i / 8) * kBlockBytes + half * 8 * 128;
      const float x = acc[4 * i + 2 * half], y = acc[4 * i + 2 * half + 1];
      const uint32_t packed = kScaled ? sm80::pack2<Element>(x * scale[half], y * scale[half]) : sm80::pack2<Element>(x, y);
      st_shared_s32(addr, int(packed));
    }
}


// The same layout from accumulators already packed as wgmma A fragments (pack_fragments below):
// fragment kk, register e holds accumulator pair (4i + 2 half, + 1) with i = 2kk + e / 2,
// half = e % 2, so the tile is written without the fp32 values kept live.
// first_chunk: the fragments' column 0 is 16-byte chunk first_chunk of the 64-column block (a
// narrower tile written into part of a wider one: kColumns + 8 first_chunk <= 64).
template <int kColumns, int kBlockBytes = 64 * 128>
__device__ __forceinline__ void store_fragments_sw128(uint32_t tile, const uint32_t (&frag)[kColumns / 16][4], int warp, int lane,
                                                      int first_chunk = 0) {
  const uint32_t base = opaque_u32(tile + uint32_t(16 * warp + lane / 4) * 128 + (lane / 4) * 16 + (lane % 4) * 4);
#pragma unroll
  for (int kk = 0; kk < kColumns / 16; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 2 * kk + e / 2, half = e % 2;
      st_shared_s32((base ^ uint32_t(((i + first_chunk) % 8) * 16)) + (i / 8) * kBlockBytes + half * 8 * 128, int(frag[kk][e]));
    }
}

// Accumulators of an m64nN tile as the register A operand of a wgmma whose K dimension is the
// tile's N: k16 step kk is accumulators 8kk .. 8kk + 7, packed in pairs.
template <typename Element, int kRegs>
__device__ __forceinline__ void pack_fragments(uint32_t (&frag)[kRegs / 8][4], const float (&acc)[kRegs]) {
#pragma unroll
  for (int kk = 0; kk < kRegs / 8; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) frag[kk][e] = sm80::pack2<Element>(acc[8 * kk + 2 * e], acc[8 * kk + 2 * e + 1]);
}

// Keeps fragments that an async wgmma reads live (and unmoved) until after its wait.
template <int kCount>
__device__ __forceinline__ void fence_fragments(uint32_t (&frag)[kCount][4]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(frag[i][e])::"memory");
}

}  // namespace flashattn::sm90
