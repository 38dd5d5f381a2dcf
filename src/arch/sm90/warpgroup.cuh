// Warp-specialisation helpers (sm90a): register reallocation between warpgroups, named barriers,
// electing one thread of a warp, and warp-uniform values.
#pragma once

#include <cstdint>

namespace flashattn::sm90 {

// setmaxnreg takes effect only under a register cap at entry (__launch_bounds__(threads, 1)) and
// when every warp of the warpgroup executes it.
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Named barriers (ids 1..15; 0 is __syncthreads): `threads` must be a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Barrier kFirstId + index (index 0, 1 or 2: a consumer warpgroup), with the id a constant in each
// branch: an id in a register makes ptxas reserve all 16 barriers.
template <uint32_t kFirstId, uint32_t kThreads>
__device__ __forceinline__ void named_barrier_sync_of(int index) {
  if (index == 0) named_barrier_sync(kFirstId + 0, kThreads);
  else if (index == 1) named_barrier_sync(kFirstId + 1, kThreads);
  else named_barrier_sync(kFirstId + 2, kThreads);
}
template <uint32_t kFirstId, uint32_t kThreads>
__device__ __forceinline__ void named_barrier_arrive_of(int index) {
  if (index == 0) named_barrier_arrive(kFirstId + 0, kThreads);
  else if (index == 1) named_barrier_arrive(kFirstId + 1, kThreads);
  else named_barrier_arrive(kFirstId + 2, kThreads);
}

// x as lane 0 of the warp holds it (every lane active): a value the warp shares (its warpgroup,
// a tile read from shared memory) becomes one ptxas can see is uniform, so that what is formed
// from it (addresses, wgmma descriptors) goes to the uniform datapath instead of per-thread
// registers and R2UR.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// True in exactly one lane of the (fully active) warp.
__device__ __forceinline__ bool elect_one() {
  uint32_t pred = 0;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(pred));
  return pred != 0;
}

}  // namespace flashattn::sm90
