// Thread-block clusters (sm90): the CTA's rank in its cluster, the cluster barrier, and loads
// from another CTA's shared memory (distributed shared memory). Below sm90 they compile to
// nothing; the host launches clusters only on sm90 devices.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "arch/sm90/launch_config.h"

namespace flashattn::sm90 {

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif
  return rank;
}

// Every non-exited thread of the cluster arrives, then waits for the others: this thread's
// shared-memory writes before it are visible to the cluster's reads after it (release/acquire).
// A thread that has exited counts as arrived, so warps with nothing left to do may leave first.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The address in CTA `rank`'s shared memory of the variable at `smem_addr` in this CTA's.
__device__ __forceinline__ uint32_t cluster_map_shared(uint32_t smem_addr, uint32_t rank) {
  uint32_t remote = smem_addr;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr), "r"(rank));
#endif
  return remote;
}

__device__ __forceinline__ float4 ld_cluster_f32x4(uint32_t cluster_addr) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(cluster_addr)
               : "memory");
#endif
  return v;
}

__device__ __forceinline__ float2 ld_cluster_f32x2(uint32_t cluster_addr) {
  float2 v = make_float2(0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(cluster_addr) : "memory");
#endif
  return v;
}

// Host: launches `kernel` in clusters of cluster_x CTAs along x (gridDim.x a multiple of it), as a
// programmatic dependent of the kernel before it when `dependent` (grid_dependency.cuh). Clusters
// of more than 8 CTAs need the kernel's non-portable cluster size allowed first
// (allow_large_clusters).
template <typename... Params, typename... Args>
cudaError_t launch_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                               unsigned cluster_x, bool dependent, Args&&... args) {
  const LaunchConfig launch(grid, block, smem_bytes, stream, cluster_x, dependent);
  return cudaLaunchKernelEx(&launch.config, kernel, std::forward<Args>(args)...);
}

// Host: how many clusters of cluster_x CTAs of `kernel` (a kernel or its const void* address) the
// device can hold at once (0: none fits, so a launch in such clusters would fail).
template <typename Kernel>
cudaError_t max_active_clusters(int* clusters, Kernel kernel, dim3 block, size_t smem_bytes, unsigned cluster_x) {
  const LaunchConfig launch(dim3(cluster_x), block, smem_bytes, nullptr, cluster_x, false);
  return cudaOccupancyMaxActiveClusters(clusters, kernel, &launch.config);
}

// Host: lets `kernel` run in clusters of up to 16 CTAs (8 without it).
template <typename Kernel>
cudaError_t allow_large_clusters(Kernel kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}

}  // namespace flashattn::sm90
