// wgmma accumulators of a 64-row tile to shared memory, as a K-major tile in the 128-byte swizzle
// (what a TMA store or an SS wgmma reads): column blocks of 64 elements, rows of 128 bytes.
#pragma once

#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/stmatrix.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/wgmma.cuh"

namespace flashattn::sm90 {

// Thread (warp, lane) of the warpgroup holds accumulator pair (4i + 2 half, + 1) of row
// 16 warp + lane / 4 + 8 half, columns 8i + 2 (lane % 4) + {0, 1}: 16-byte chunk i of the row
// (chunk i % 8 of column block i / 8), XORed with the row's low three bits by the swizzle.
// `tile` is 1024-byte aligned (the swizzle's period); column blocks are kBlockBytes apart (64
// rows: 8192; a taller tile whose rows these 64 are).
//
// Two ways to store that layout, each measured faster where it is used (docs/PERF.md):
//  - Words: one 4-byte store per pair. One base register per lane (its row, the swizzle's XOR term
//    (lane / 4) * 16 and the lane's 4 bytes); chunk i is one XOR with a constant (bits 4-6), the
//    column block and the row half constant offsets. Each store hits 32 distinct banks.
//  - Stmatrix: a k16 group kk (chunks 2kk and 2kk + 1 of the warp's 16 rows) in one stmatrix.x4:
//    matrix m holds rows 8 (m % 2) .. + 7 of chunk 2kk + m / 2, and lane l gives the address of
//    row l % 8 of matrix l / 8. One base register per lane (its row, and the swizzle's XOR term of
//    its row and its matrix's chunk parity); group kk is one XOR with a constant and offsets.
enum class SmemStores { Words, Stmatrix };

__device__ __forceinline__ uint32_t words_base_sw128(uint32_t tile, int warp, int lane) {
  return opaque_u32(tile + uint32_t(16 * warp + lane / 4) * 128 + (lane / 4) * 16 + (lane % 4) * 4);
}

__device__ __forceinline__ uint32_t stmatrix_base_sw128(uint32_t tile, int warp, int lane) {
  const int matrix = lane / 8, row = lane % 8;
  return opaque_u32(tile + uint32_t(16 * warp + row + 8 * (matrix % 2)) * 128 + uint32_t((row ^ (matrix / 2)) * 16));
}

// 16-byte chunk c of the row a base above points to: the swizzle's XOR of the chunk number
// (bits 4-6, onto the base's own XOR term) and the column block c / 8. For stmatrix, c is even:
// the XOR leaves bit 4, the lane's matrix parity, alone.
template <int kBlockBytes>
__device__ __forceinline__ uint32_t chunk_at_sw128(uint32_t base, int c) {
  return (base ^ uint32_t((c % 8) * 16)) + uint32_t(c / 8) * kBlockBytes;
}

// Accumulators of a 64 x kColumns tile (kColumns a multiple of 8; of 16 by stmatrix) to shared
// memory, packed to Element; row half h multiplied by scale[h] when kScaled.
template <typename Element, int kColumns, bool kScaled, int kBlockBytes = 64 * 128, SmemStores kStores = SmemStores::Words>
__device__ __forceinline__ void store_accumulators_sw128(uint32_t tile, const float* acc, const float (&scale)[2], int warp, int lane) {
  auto packed = [&](int a, int half) {
    return kScaled ? sm80::pack2<Element>(acc[a] * scale[half], acc[a + 1] * scale[half]) : sm80::pack2<Element>(acc[a], acc[a + 1]);
  };
  if constexpr (kStores == SmemStores::Stmatrix) {
    static_assert(kColumns % 16 == 0, "whole k16 groups");
    const uint32_t base = stmatrix_base_sw128(tile, warp, lane);
#pragma unroll
    for (int kk = 0; kk < kColumns / 16; ++kk)
      stmatrix_x4(chunk_at_sw128<kBlockBytes>(base, 2 * kk), packed(8 * kk, 0), packed(8 * kk + 2, 1), packed(8 * kk + 4, 0),
                  packed(8 * kk + 6, 1));
  } else {
    const uint32_t base = words_base_sw128(tile, warp, lane);
#pragma unroll
    for (int i = 0; i < kColumns / 8; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        st_shared_s32(chunk_at_sw128<kBlockBytes>(base, i) + uint32_t(half * 8 * 128), int(packed(4 * i + 2 * half, half)));
  }
}

// The same layout from accumulators already packed as wgmma A fragments (pack_fragments below):
// fragment kk, register e holds accumulator pair (4i + 2 half, + 1) with i = 2kk + e / 2,
// half = e % 2 (stmatrix's matrix e), so the tile is written without the fp32 values kept live.
// first_chunk (even): the fragments' column 0 is 16-byte chunk first_chunk of the 64-column
// block (a narrower tile written into part of a wider one: kColumns + 8 first_chunk <= 64).
template <int kColumns, int kBlockBytes = 64 * 128>
__device__ __forceinline__ void store_fragments_sw128(uint32_t tile, const uint32_t (&frag)[kColumns / 16][4], int warp, int lane,
                                                      int first_chunk = 0) {
  const uint32_t base = stmatrix_base_sw128(tile, warp, lane);
#pragma unroll
  for (int kk = 0; kk < kColumns / 16; ++kk)
    stmatrix_x4(chunk_at_sw128<kBlockBytes>(base, 2 * kk + first_chunk), frag[kk][0], frag[kk][1], frag[kk][2], frag[kk][3]);
}

// An m64 x 8kGroups accumulator tile stored transposed: row n of `tile` (128 bytes, the 128-byte
// swizzle) receives column n's 64 elements, the K-major layout of an operand whose K is the tile's
// M side. pairs[2i + h] holds accumulator pair (4i + 2h, + 1) (row 16 warp + lane / 4 + 8h,
// columns 8i + 2 (lane % 4) + {0, 1}), packed: it is matrix (h, i) of stmatrix .trans, whose
// columns become rows 8i .. 8i + 7 at 16-byte chunk 2 warp + h. Two column groups per x4, an odd
// last one by x2. `tile` is 1024-byte aligned.
template <int kGroups>
__device__ __forceinline__ void store_pairs_transposed_sw128(uint32_t tile, const uint32_t (&pairs)[2 * kGroups], int warp, int lane) {
  const int row = lane % 8, matrix = lane / 8;  // x4: matrix 2 (i - 2a) + h
  const uint32_t base = opaque_u32(tile + uint32_t(row * 128 + ((2 * warp + matrix % 2) ^ row) * 16));
#pragma unroll
  for (int a = 0; a < kGroups / 2; ++a)
    stmatrix_x4_trans(base + uint32_t((2 * a + matrix / 2) * 1024), pairs[4 * a], pairs[4 * a + 1], pairs[4 * a + 2], pairs[4 * a + 3]);
  if constexpr (kGroups % 2 == 1)
    stmatrix_x2_trans(base + uint32_t((kGroups - 1) * 1024), pairs[2 * kGroups - 2], pairs[2 * kGroups - 1]);
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
