// One warpgroup's m64 x N x K product as a chain of wgmma k16 steps over tiles in the 128-byte
// swizzle (64-element column blocks, rows of 128 bytes, column blocks `*_block_bytes` apart), one
// commit group. Each takes its tiles' shared-memory addresses and passes them through opaque_u32
// first: the descriptors are then formed where the group is issued, not hoisted out of a loop
// and held in registers across it.
//   kk: A (64 rows) and B (N rows) both K-major: k16 step j is column block j / 4, + 32 (j % 4) bytes.
//   rk: A from registers (pack_fragments), B MN-major (K rows, N columns): step j at row 16 j.
//   km: A K-major (as kk) and B MN-major (as rk).
//   mm: A MN-major (K rows, 64 columns: read transposed) and B MN-major: step j at row 16 j.
//   mk: A MN-major (as mm) and B K-major within one column block (K <= 64): step j at 32 j bytes.
// kFirst: the first step overwrites d (ss_first: its old values are neither read nor kept live).
#pragma once

#include <cstdint>

#include "arch/sm90/wgmma.cuh"

namespace flashattn::sm90 {

template <typename Element, int kN, int kDepth, bool kFirst>
__device__ __forceinline__ void wgmma_kk(float (&d)[kN / 2], uint32_t a_tile, int a_block_bytes, uint32_t b_tile, int b_block_bytes) {
  const SmemDescriptor a(kmajor_descriptor_at(opaque_u32(a_tile))), b(kmajor_descriptor_at(opaque_u32(b_tile)));
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < kDepth / 16; ++j) {
    const uint64_t da = a.at((j / 4) * a_block_bytes + (j % 4) * 32);
    const uint64_t db = b.at((j / 4) * b_block_bytes + (j % 4) * 32);
    if (kFirst && j == 0) Wgmma<Element, kN>::template ss_first<0>(d, da, db);
    else Wgmma<Element, kN>::template ss<0>(d, da, db, 1);
  }
  wgmma_commit();
}

// accumulate = 0: d = A B (d's old values unused, but still an operand: the compiler keeps d
// live, so a loop can start accumulators this way without zeroing them).
template <typename Element, int kN, int kDepth>
__device__ __forceinline__ void wgmma_rk(float (&d)[kN / 2], const uint32_t (&a)[kDepth / 16][4], uint32_t b_tile, int b_block_bytes,
                                         int accumulate) {
  const SmemDescriptor b(mnmajor_descriptor_at(opaque_u32(b_tile), b_block_bytes));
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < kDepth / 16; ++j) Wgmma<Element, kN>::template rs<1>(d, a[j], b.at(j * 2048), j > 0 ? 1 : accumulate);
  wgmma_commit();
}

// accumulate = 0: d = A B (as wgmma_rk).
template <typename Element, int kN, int kDepth>
__device__ __forceinline__ void wgmma_km(float (&d)[kN / 2], uint32_t a_tile, int a_block_bytes, uint32_t b_tile, int b_block_bytes,
                                         int accumulate) {
  const SmemDescriptor a(kmajor_descriptor_at(opaque_u32(a_tile))), b(mnmajor_descriptor_at(opaque_u32(b_tile), b_block_bytes));
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < kDepth / 16; ++j)
    Wgmma<Element, kN>::template ss<1>(d, a.at((j / 4) * a_block_bytes + (j % 4) * 32), b.at(j * 2048), j > 0 ? 1 : accumulate);
  wgmma_commit();
}

template <typename Element, int kN, int kDepth, bool kFirst>
__device__ __forceinline__ void wgmma_mm(float (&d)[kN / 2], uint32_t a_tile, int a_block_bytes, uint32_t b_tile, int b_block_bytes) {
  const SmemDescriptor a(mnmajor_descriptor_at(opaque_u32(a_tile), a_block_bytes)), b(mnmajor_descriptor_at(opaque_u32(b_tile), b_block_bytes));
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < kDepth / 16; ++j) {
    const uint64_t da = a.at(j * 2048);
    const uint64_t db = b.at(j * 2048);
    if (kFirst && j == 0) Wgmma<Element, kN>::template ss_first<1, 1>(d, da, db);
    else Wgmma<Element, kN>::template ss<1, 1>(d, da, db, 1);
  }
  wgmma_commit();
}

// accumulate = 0: d = A B (as wgmma_rk).
template <typename Element, int kN, int kDepth>
__device__ __forceinline__ void wgmma_mk(float (&d)[kN / 2], uint32_t a_tile, uint32_t b_tile, int accumulate) {
  static_assert(kDepth <= 64, "B's K within one 64-element column block");
  const SmemDescriptor a(mnmajor_descriptor_at(opaque_u32(a_tile), 64 * 128)), b(kmajor_descriptor_at(opaque_u32(b_tile)));
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < kDepth / 16; ++j) Wgmma<Element, kN>::template ss<0, 1>(d, a.at(j * 2048), b.at(j * 32), j > 0 ? 1 : accumulate);
  wgmma_commit();
}

}  // namespace flashattn::sm90
