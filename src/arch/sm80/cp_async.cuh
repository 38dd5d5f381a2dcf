// cp.async: 16-byte global -> shared copies that bypass registers, grouped and waited on.
#pragma once

#include <cstdint>

namespace flashattn::sm80 {

// Copies 16 bytes, or writes 16 zero bytes when !valid (src is then not read, but must be a
// valid address: pass any pointer into the tensor). kL2Prefetch (0, 64, 128 or 256): the L2 may
// fetch that many bytes around the source at once (PTX's .L2::NB prefetch-size hint).
template <int kL2Prefetch = 0>
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* src, bool valid) {
  static_assert(kL2Prefetch == 0 || kL2Prefetch == 64 || kL2Prefetch == 128 || kL2Prefetch == 256, "prefetch size");
  const int src_bytes = valid ? 16 : 0;
  if constexpr (kL2Prefetch == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(src), "r"(src_bytes));
  else if constexpr (kL2Prefetch == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(src), "r"(src_bytes));
  else if constexpr (kL2Prefetch == 64)
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(src), "r"(src_bytes));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace flashattn::sm80
