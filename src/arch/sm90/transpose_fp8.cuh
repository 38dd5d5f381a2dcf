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

// Bytes of the destination of a kKeys x kCols transpose (whole 128-key blocks).
template <int kKeys, int kCols>
inline constexpr int kTransposedBytes = (kKeys + 127) / 128 * 128 * kCols;

// One warp's share (`worker` of kWorkers, all lanes active) of the transpose of `src` into
// `dst` (shared-memory addresses, both 1024-byte aligned). Keys >= valid_keys are written as
// zero (keys past a sequence's end: P is 0 there, and 0 * NaN would still be NaN). kInFlight
// units' loads in flight (1 or 2) before their stores (the shared accesses are volatile, so the
// compiler would not overlap them by itself).
//
// A whole tile: the worker takes key groups worker, worker + kWorkers, ... and every column group
// of each, unrolled, so that a unit's addresses are a per-group register, a constant and at most
// one XOR (the source's column term flips address bits that its other terms leave alone); the
// destination's key term is one XOR per key group. Issue slots are what the transposing warps
// take from the consumers on their schedulers, so a unit is its load, four PRMT, its store and
// about one address add. A ragged tile (only a sequence's last) takes a simple loop over units
// with the key mask.
template <int kKeys, int kCols, int kSrcSwizzle, int kWorkers, int kInFlight>
__device__ __forceinline__ void transpose_e4m3_to_kmajor(uint32_t src, uint32_t dst, int valid_keys, int worker, int lane) {
  static_assert(kKeys % 16 == 0 && kCols % 64 == 0, "whole 16-key groups, pairs of 32-column units");
  static_assert(kSrcSwizzle == 128 || kSrcSwizzle == 64, "source rows of 128 or 64 bytes");
  static_assert(kInFlight == 1 || kInFlight == 2, "one or two units in flight");
  constexpr int kColGroups = kCols / 32, kKeyGroups = kKeys / 16, kGroupsPerRow = kSrcSwizzle / 32;
  constexpr uint32_t kColumnBlockBytes = kKeys * kSrcSwizzle, kKeyGroupBytes = 16 * kSrcSwizzle;
  const uint32_t l = uint32_t(lane);
  // The row this lane addresses: load matrix l / 8 = (column half, key half), key 8 (l / 8 % 2) +
  // l % 8 of the unit, columns 16 (l / 16) ..; store matrix l / 8 = (column half, parity),
  // destination row (column) 16 (l / 16) + 2 (l % 8) + (l / 8 % 2 ^ (l % 8 >= 4)).
  const uint32_t load_key = 8 * (l / 8 % 2) + l % 8, half = l / 16;
  const uint32_t store_col = 16 * half + 2 * (l % 8) + ((l / 8 % 2) ^ uint32_t(l % 8 >= 4));
  // Source: unit (g, C) reads row 16 g + load_key of column block C / kGroupsPerRow, 16-byte
  // chunk 2 (C % kGroupsPerRow) + half XOR the row's swizzle bits, which 16 g leaves unchanged:
  // chunk = (half ^ bits) ^ 2 (C % kGroupsPerRow).
  const uint32_t src_bits = (load_key * kSrcSwizzle >> 7) & uint32_t(kSrcSwizzle / 16 - 1);
  const uint32_t src_lane = load_key * kSrcSwizzle + ((half ^ src_bits) << 4);
  // Destination: row 32 C + store_col of key block g / 8, chunk (g % 8) XOR (store_col % 8).
  const uint32_t dst_lane = store_col * 128 + ((store_col % 8) << 4);
  auto dst_of_group = [&](uint32_t g) { return dst + (g / 8) * (kCols * 128) + (dst_lane ^ ((g % 8) << 4)); };
  // The lane's keys in its registers: 2q, 2q + 1 (+ 8 in the odd ones) of the unit.
  const uint32_t q = l % 4;
  // A register's two words for stmatrix: parity e' = 0 holds column 2r + (r >= 4), e' = 1 the
  // other (r = l / 4; see the top). Registers 0, 1: column half 0 (key halves 0, 1); 2, 3:
  // column half 1.
  const uint32_t select_even = l / 4 >= 4 ? 0x7531u : 0x6420u, select_odd = select_even ^ 0x1111u;
  auto store = [&](uint32_t addr, const uint32_t (&r)[4]) {
    stmatrix_x4(addr, __byte_perm(r[0], r[1], select_even), __byte_perm(r[0], r[1], select_odd), __byte_perm(r[2], r[3], select_even),
                __byte_perm(r[2], r[3], select_odd));
  };
  if (valid_keys < kKeys) {
    constexpr int kUnits = kKeyGroups * kColGroups;
#pragma unroll 1
    for (int unit = worker; unit < kUnits; unit += kWorkers) {
      const uint32_t g = uint32_t(unit) / kColGroups, c = uint32_t(unit) % kColGroups;
      uint32_t r[4];
      sm80::ldmatrix_x4_trans(r, src + (c / kGroupsPerRow) * kColumnBlockBytes + g * kKeyGroupBytes + (src_lane ^ ((c % kGroupsPerRow) << 5)));
      const int key = int(16 * g + 2 * q);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int k0 = key + 8 * (m % 2);
        r[m] &= (k0 < valid_keys ? 0x0000ffffu : 0u) | (k0 + 1 < valid_keys ? 0xffff0000u : 0u);
      }
      store(dst_of_group(g) + c * (32 * 128), r);
    }
    return;
  }
  // The lane's source in its key group; column group C adds (C / kGroupsPerRow) column blocks
  // and flips bits 5, 6 by C % kGroupsPerRow (src and the key groups' offsets are multiples of
  // 1024, so those bits are the lane term's alone).
  uint32_t src_g = src + uint32_t(worker) * kKeyGroupBytes + src_lane;
#pragma unroll 1
  for (int g = worker; g < kKeyGroups; g += kWorkers, src_g += kWorkers * kKeyGroupBytes) {
    const uint32_t dst_g = dst_of_group(uint32_t(g));
    auto src_of = [&](int c) { return (src_g ^ uint32_t((c % kGroupsPerRow) << 5)) + (c / kGroupsPerRow) * kColumnBlockBytes; };
#pragma unroll
    for (int c = 0; c < kColGroups; c += kInFlight) {
      uint32_t r[kInFlight][4];
#pragma unroll
      for (int i = 0; i < kInFlight; ++i) sm80::ldmatrix_x4_trans(r[i], src_of(c + i));
#pragma unroll
      for (int i = 0; i < kInFlight; ++i) store(dst_g + (c + i) * (32 * 128), r[i]);
    }
  }
}

}  // namespace flashattn::sm90
