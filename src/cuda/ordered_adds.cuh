// The ordering of dQ adds across CTAs in the backward's deterministic mode (FA2 and FA3): one counter per
// (sequence, query head, row block) counts the key blocks that have added their share.
#pragma once

namespace flashattn::gpu {

// Called by one thread: waits until `target` key blocks have added to the row block. Bounded: a
// broken ordering traps (a launch error) instead of hanging the GPU; real waits take
// microseconds to milliseconds, the bound seconds.
__device__ __forceinline__ void bwd_wait_counter(const int* counter, int target) {
  int polls = 0;
  while (true) {
    int done;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(done) : "l"(counter) : "memory");
    if (done >= target) return;
    __nanosleep(64);
    if (++polls > (1 << 26)) __trap();
  }
}

// Called by one thread after the CTA's adds were fenced and a barrier passed.
__device__ __forceinline__ void bwd_signal_counter(int* counter) { atomicAdd(counter, 1); }

}  // namespace flashattn::gpu
