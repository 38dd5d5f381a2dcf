// Warpgroup MMA (sm90a): shared-memory matrix descriptors for the 128-byte swizzle that the TMA
// loads produce, and the fence / commit / wait around wgmma.mma_async.
//
// Layouts (16-bit elements, 128-byte swizzle: an atom is 8 rows of 128 bytes = 64 elements, rows
// XOR-permuted in 16-byte chunks by row % 8; atoms must start 1024-byte aligned):
//   K-major operand (A = Q, B = K for S = Q K^T): rows = M or N, 64 K-elements per row. Atoms
//     stack along M/N every 1024 bytes (SBO); the leading offset is unused. The k16 step j inside
//     the 64-wide row starts 32 * j bytes further; a K extent over 64 is a second block of rows.
//   MN-major operand (B = V for O += P V, rows = keys, 64 head-dim elements per row): atoms stack
//     along K (keys) every 1024 bytes (SBO), and along N (the next 64 head-dim columns) every LBO.
#pragma once

#include <cstdint>

#include "arch/sm90/wgmma_ops.cuh"

namespace flashattn::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Descriptor bits: [0,14) start >> 4, [16,30) leading byte offset >> 4, [32,46) stride byte offset
// >> 4, [62,64) swizzle mode (1 = 128-byte). `smem_addr` is a shared-memory address (smem_u32): the
// layout bits are constants and only the start field varies.
__device__ __forceinline__ uint64_t sw128_descriptor_at(uint32_t smem_addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((smem_addr & 0x3ffffu) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3fffu) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3fffu) << 32) | (uint64_t(1) << 62);
}

// K-major operand with 128-byte swizzle, starting where this k16 step starts.
__device__ __forceinline__ uint64_t kmajor_descriptor_at(uint32_t smem_addr) { return sw128_descriptor_at(smem_addr, 16, 1024); }
__device__ __forceinline__ uint64_t kmajor_descriptor(const void* smem) { return kmajor_descriptor_at(smem_u32(smem)); }

// MN-major operand with 128-byte swizzle; `column_block_bytes` separates 64-wide column blocks.
__device__ __forceinline__ uint64_t mnmajor_descriptor_at(uint32_t smem_addr, uint32_t column_block_bytes) {
  return sw128_descriptor_at(smem_addr, column_block_bytes, 1024);
}
__device__ __forceinline__ uint64_t mnmajor_descriptor(const void* smem, uint32_t column_block_bytes) {
  return mnmajor_descriptor_at(smem_u32(smem), column_block_bytes);
}

// A descriptor in its two words. The high word (stride byte offset, swizzle mode) is a constant of
// the layout; the low word (start >> 4, leading byte offset) is the only part a k step moves.
// Shared addresses stay below 2^18, so a step's byte offset adds offset >> 4 to the start field
// without a carry into the leading offset: one integer add per step instead of re-forming the
// whole descriptor from the step's address.
struct SmemDescriptor {
  uint32_t lo, hi;
  __device__ __forceinline__ explicit SmemDescriptor(uint64_t bits) : lo(uint32_t(bits)), hi(uint32_t(bits >> 32)) {}
  // The descriptor of the same layout `offset_bytes` (a multiple of 16) further on.
  __device__ __forceinline__ uint64_t at(uint32_t offset_bytes) const { return (uint64_t(hi) << 32) | (lo + (offset_bytes >> 4)); }
};

// A copy of x the compiler cannot see through: computed where it is used, never hoisted out of a
// loop and kept live across it (descriptor values hoisted that way cost the consumers registers).
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
  uint32_t y;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across an async wgmma.
template <int kCount>
__device__ __forceinline__ void fence_accumulators(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace flashattn::sm90
