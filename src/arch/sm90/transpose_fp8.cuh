// The V transpose of the fp8 forward: e4m3 wgmma reads both operands K-major, but O += P V has
// V's keys as its K dimension and the TMA lands V with keys as rows. Warps of the producer
// warpgroup turn each V tile into its K-major form in shared memory while the consumers' GEMMs
// run: 32-bit shared loads, a 4 x 4 byte transpose in registers (PRMT), 32-bit shared stores.
//
// Source ([kCols / kSrcSwizzle] column blocks of [kKeys rows][kSrcSwizzle bytes], the swizzle
// the TMA wrote, 128 or 64 bytes) -> destination ([ceil(kKeys / 128)] key blocks of [kCols
// rows][128 bytes], 128-byte swizzle, key positions 128 b .. 128 b + 127 in block b; positions
// past kKeys in the last block are left unwritten and never read). Within each 16-key group the
// keys are stored in the order of fp8.cuh's kmajor_p_column: position 16 g + c holds key
// 16 g + kmajor_p_column(c), matching the P fragments of pack_fragments_e4m3.
//
// Work unit: 16 keys (group g) x 32 columns (group C). Lane (u = lane / 8, v = lane % 8) loads
// the words of columns 32 C + 4 v .. + 3 of keys 16 g + 2 u + {0, 1, 8, 9} and stores, after the
// transpose, the words of destination rows 32 C + 4 v + {0..3} at positions 16 g + 4 u .. + 3.
// Bank conflicts: the loads of one instruction hit 32 distinct banks (128-byte source rows; the
// swizzle spreads u and v / 4 over the eight chunks), 2-way with 64-byte rows. For the stores,
// destination row n = 32 C + 4 v + s has chunk (g ^ n % 8), which takes only two values over v
// for a fixed s; so lane v rotates its words by v / 2 first and stores row 4 v + (s + v / 2) % 4
// in its s-th store: n % 8 then differs across the eight v and every store hits 32 banks.
#pragma once

#include <cstdint>

#include "arch/sm90/fp8.cuh"
#include "arch/sm90/tma.cuh"

namespace flashattn::sm90 {

// The byte offset of (row, byte) in a kSwizzleBytes-swizzled tile of kSwizzleBytes-byte rows
// (the 16-byte chunk index XORed with address bits 7.. as the TMA and wgmma swizzles do).
template <int kSwizzleBytes>
__device__ __forceinline__ uint32_t swizzled_offset(uint32_t row, uint32_t byte) {
  const uint32_t offset = row * kSwizzleBytes + byte;
  return offset ^ (((offset >> 7) & uint32_t(kSwizzleBytes / 16 - 1)) << 4);
}

__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t smem_addr) {
  uint32_t value;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(value) : "r"(smem_addr) : "memory");
  return value;
}
__device__ __forceinline__ void st_shared_u32(uint32_t smem_addr, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(smem_addr), "r"(value) : "memory");
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
  const uint32_t u = uint32_t(lane) / 8, v = uint32_t(lane) % 8, rotate = v / 2;
  // A unit's key group g and this lane's first of four columns.
  struct Unit {
    uint32_t g, col;
  };
  auto unit_at = [&](int unit) { return Unit{uint32_t(unit) / kColGroups, 32 * (uint32_t(unit) % kColGroups) + 4 * v}; };
#pragma unroll 1
  for (int first = worker; first < kUnits; first += workers * kBatch) {
    uint32_t w[kBatch][4];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int unit = first + k * workers;
      if (k > 0 && unit >= kUnits) break;  // uniform over the warp (unit 0 is in range)
      const auto [g, col] = unit_at(unit);
      const uint32_t src_block = src + (col / kSrcSwizzle) * (kKeys * kSrcSwizzle);
      const uint32_t key0 = 16 * g + 2 * u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t key = key0 + uint32_t(j % 2 + 8 * (j / 2));
        const uint32_t word = ld_shared_u32(src_block + swizzled_offset<kSrcSwizzle>(key, col % kSrcSwizzle));
        // Byte b of w[j] = column col + (b + rotate) % 4 of this key.
        w[k][j] = int(key) < valid_keys ? __funnelshift_r(word, word, 8 * rotate) : 0u;
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int unit = first + k * workers;
      if (k > 0 && unit >= kUnits) break;
      const auto [g, col] = unit_at(unit);
      // 4 x 4 byte transpose: out[s] byte j = w[j] byte s.
      const uint32_t t0 = __byte_perm(w[k][0], w[k][1], 0x5140), t1 = __byte_perm(w[k][0], w[k][1], 0x7362);
      const uint32_t t2 = __byte_perm(w[k][2], w[k][3], 0x5140), t3 = __byte_perm(w[k][2], w[k][3], 0x7362);
      const uint32_t out[4] = {__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632), __byte_perm(t1, t3, 0x5410),
                               __byte_perm(t1, t3, 0x7632)};
      const uint32_t position = 16 * g + 4 * u;  // key positions position .. + 3: keys key0 + {0, 1, 8, 9}
      const uint32_t dst_block = dst + (position / 128) * (kCols * 128);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t row = col + (uint32_t(s) + rotate) % 4;
        st_shared_u32(dst_block + swizzled_offset<128>(row, position % 128), out[s]);
      }
    }
  }
}

}  // namespace flashattn::sm90
