// TMA (cp.async.bulk.tensor) loads into shared memory completing on an mbarrier, stores from
// shared memory and bulk reductions into global memory, over CCCL's cuda::ptx. Tensor maps are built on the host (tensor_map.h) and passed
// to kernels as __grid_constant__ parameters. Coordinates are innermost-first, in elements.
#pragma once

#include <cuda.h>

#include <cuda/ptx>

#include <cstdint>

namespace flashattn::sm90 {

__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
  const int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, map, coords, bar);
}

__device__ __forceinline__ void tma_load_4d(void* smem, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                            int32_t c3, uint64_t* bar) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, map, coords, bar);
}

__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* smem, int32_t c0, int32_t c1, int32_t c2,
                                             int32_t c3) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coords, smem);
}

// `bytes` contiguous bytes from global to shared memory (both 16-byte aligned, a multiple of 16),
// completing on `bar` like a TMA load (count them in its expect-tx).
__device__ __forceinline__ void bulk_load(void* smem, const void* global, uint32_t bytes, uint64_t* bar) {
  cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, global, bytes, bar);
}
// global[i] += shared[i] over `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte
// aligned), by the TMA unit: one instruction for a whole staged tile. A bulk group, as the stores.
__device__ __forceinline__ void bulk_reduce_add(float* global, const float* smem, uint32_t bytes) {
  cuda::ptx::cp_reduce_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add, global, smem, bytes);
}

__device__ __forceinline__ void tma_store_commit() { cuda::ptx::cp_async_bulk_commit_group(); }
// Waits until the stores' (and bulk reductions') shared-memory reads are done (the buffer may then be reused).
__device__ __forceinline__ void tma_store_wait_read() { cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{}); }
// Waits until at most kPending of the newest groups still read shared memory.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read_pending() {
  cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<kPending>{});
}
// Waits until they are complete (their global writes done).
__device__ __forceinline__ void tma_store_wait() { cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{}); }

// A 32-bit word at a shared-memory address (smem_u32). Explicit: a pointer the kernel derived from
// an aligned integer would be accessed through the generic space.
__device__ __forceinline__ void st_shared_s32(uint32_t smem_addr, int value) {
  asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(smem_addr), "r"(value) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(uint32_t smem_addr) {
  int value;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(value) : "r"(smem_addr) : "memory");
  return value;
}

// Two floats at smem_addr + kOffset: the constant offset rides in the instruction, so loads at
// several offsets from one base need one address register.
template <int kOffset = 0>
__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t smem_addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2 + %3];\n" : "=f"(v.x), "=f"(v.y) : "r"(smem_addr), "n"(kOffset) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_f32x4(uint32_t smem_addr, float x, float y, float z, float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
// 16 zero bytes at a shared-memory address (smem_u32).
__device__ __forceinline__ void st_shared_zero16(uint32_t smem_addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem_addr), "r"(0u) : "memory");
}

// Orders this thread's generic-proxy global accesses (an acquire of another CTA's release) before
// its later async-proxy ones (bulk reductions) on global memory.
__device__ __forceinline__ void fence_async_global() { cuda::ptx::fence_proxy_async(cuda::ptx::space_global); }
// Ordinary shared-memory stores must be fenced before the async proxy (TMA, wgmma) reads them.
__device__ __forceinline__ void fence_async_shared() { cuda::ptx::fence_proxy_async(cuda::ptx::space_shared); }

}  // namespace flashattn::sm90
