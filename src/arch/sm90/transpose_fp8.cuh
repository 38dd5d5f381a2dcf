// The V transpose of the fp8 forward: e4m3 wgmma reads both operands K-major, but O += P V has
// V's keys as its K dimension and the TMA lands V with keys as rows. Warps of the producer
// warpgroup turn each V tile into its K-major form in shared memory while the consumers' GEMMs
// run: ldmatrix.trans (16-bit elements: byte pairs), a byte permute, stmatrix: per 512 bytes
// one load, four PRMT and one store per lane.
//
// Source ([kCols / kSrcSwizzle] column blocks of [kKeys rows][kSrcSwizzle bytes], the swizzle
// the TMA wrote, 128 or 64 bytes) -> destination ([ceil(kKeys / 128)] key blocks of [kCols
// rows][128 bytes], 128-byte swizzle, key positions 128 b .. 128 b + 127 in block b; positions
// past kKeys in the last block are left unwritten and never read). Within each 16-key group the
// keys are stored in the order of fp8.cuh's kmajor_p_column: positions 16 g + 4 q .. + 3 hold keys
// 16 g + 2 q + {0, 1, 8, 9}, matching the P fragments of pack_fragments_e4m3.
//
// Work unit: 16 keys (group g) x 32 columns (group C). The load's matrices are (keys 0..7 | 8..15)
// x (columns 0..15 | 16..31) of the unit, rows = keys; transposed, register m of lane (r = lane /
// 4, q = lane % 4) holds keys 2q, 2q + 1 of its key half, columns 2r, 2r + 1 of its column half
// (bytes: key 2q col 2r, key 2q col 2r + 1, key 2q + 1 col 2r, key 2q + 1 col 2r + 1). One PRMT of
// the two key halves gives a column's four keys 2q + {0, 1, 8, 9}: the bytes of destination row
// (column) 2r + e at positions 4q .. + 3, which is what stmatrix takes from the lane for row r of
// a matrix. The store's matrices are (column half h) x (parity e'): row r holds column 16 h + 2 r
// + (e' ^ (r >= 4)), so that the eight rows of a matrix have eight distinct (column % 8), i.e.
// swizzle chunks: the stores are conflict-free, as are the loads (eight consecutive keys of one
// column chunk lie in eight chunks under either source swizzle).
#pragma once

#include <cstdint>

#include "arch/sm80/ldmatrix.cuh"
#include "arch/sm90/fp8.cuh"
#include "arch/sm90/stmatrix.cuh"
#include "arch/sm90/tma.cuh"

namespace flashattn::sm90 {

// The byte offset of (row, byte) in a kSwizzleBytes-swizzled tile of kSwizzleBytes-byte rows
// (the 16-byte chunk index XORed with address bits 7.. as the TMA and wgmma swizzles do).
template <int kSwizzleBytes>
__device__ __forceinline__ uint32_t swizzled_offset(uint32_t row, uint32_t byte) {
  const uint32_t offset = row * kSwizzleBytes + byte;
  return offset ^ (((offset >> 7) & uint32_t(kSwizzleBytes / 16 - 1)) << 4);
}

// Bytes of the destination of a kKeys x kCols transpose (whole 128-key blocks).
template <int kKeys, int kCols>
inline constexpr int kTransposedBytes = (kKeys + 127) / 128 * 128 * kCols;

// One warp's share (`worker` of `workers`, all lanes active) of the transpose of `src` into
// `dst` (shared-memory addresses, both 1024-byte aligned). Keys >= valid_keys are written as
// zero (keys past a sequence's end: P is 0 there, and 0 * NaN would still be NaN). kBatch units
// per step: their loads are issued together (the shared accesses are volatile, so the compiler
// cannot overlap one step's loads with the previous step's stores by itself).
template <int kKeys, int kCols, int kSrcSwizzle, int kBatch = 1>
__device__ __forceinline__ void transpose_e4m3_to_kmajor(uint32_t src, uint32_t dst, int valid_keys, int worker, int workers,
                                                          int lane) {
  static_assert(kKeys % 16 == 0 && kCols % 32 == 0, "whole 16-key x 32-column units");
  static_assert(kSrcSwizzle == 128 || kSrcSwizzle == 64, "source rows of 128 or 64 bytes");
  constexpr int kColGroups = kCols / 32, kUnits = kKeys / 16 * kColGroups;
  const uint32_t l = uint32_t(lane);
  // The row this lane addresses: load matrix l / 8 = (column half, key half), key 8 (l / 8 % 2) +
  // l % 8 of the unit, columns 16 (l / 16) ..; store matrix l / 8 = (column half, parity),
  // destination row (column) 16 (l / 16) + 2 (l % 8) + (l / 8 % 2 ^ (l % 8 >= 4)).
  const uint32_t load_key = 8 * (l / 8 % 2) + l % 8, half_col = 16 * (l / 16);
  const uint32_t store_col = half_col + 2 * (l % 8) + ((l / 8 % 2) ^ uint32_t(l % 8 >= 4));
  // The lane's keys in its registers: 2q, 2q + 1 (+ 8 in the odd ones) of the unit.
  const uint32_t q = l % 4;
  // A register's two words for stmatrix: parity e' = 0 holds column 2r + (r >= 4), e' = 1 the
  // other (r = l / 4; see the top).
  const uint32_t select_even = l / 4 >= 4 ? 0x7531u : 0x6420u, select_odd = select_even ^ 0x1111u;
  const bool partial = valid_keys < kKeys;
#pragma unroll 1
  for (int first = worker; first < kUnits; first += workers * kBatch) {
    uint32_t r[kBatch][4];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int unit = first + k * workers;
      if (k > 0 && unit >= kUnits) break;  // uniform over the warp (unit 0 is in range)
      const uint32_t g = uint32_t(unit) / kColGroups, col = 32 * (uint32_t(unit) % kColGroups) + half_col;
      const uint32_t src_block = src + (col / kSrcSwizzle) * (kKeys * kSrcSwizzle);
      sm80::ldmatrix_x4_trans(r[k], src_block + swizzled_offset<kSrcSwizzle>(16 * g + load_key, col % kSrcSwizzle));
      if (partial) {  // (only a sequence's last tile)
        const int key = int(16 * g + 2 * q);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int k0 = key + 8 * (m % 2);
          r[k][m] &= (k0 < valid_keys ? 0x0000ffffu : 0u) | (k0 + 1 < valid_keys ? 0xffff0000u : 0u);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int unit = first + k * workers;
      if (k > 0 && unit >= kUnits) break;
      const uint32_t g = uint32_t(unit) / kColGroups, col = 32 * (uint32_t(unit) % kColGroups) + store_col;
      const uint32_t dst_block = dst + (16 * g / 128) * (kCols * 128);
      // Registers 0, 1: column half 0 (key halves 0, 1); 2, 3: column half 1.
      stmatrix_x4(dst_block + swizzled_offset<128>(col, 16 * g % 128), __byte_perm(r[k][0], r[k][1], select_even),
                        __byte_perm(r[k][0], r[k][1], select_odd), __byte_perm(r[k][2], r[k][3], select_even),
                        __byte_perm(r[k][2], r[k][3], select_odd));
    }
  }
}

}  // namespace flashattn::sm90
