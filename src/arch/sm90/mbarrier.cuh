// mbarrier-based producer/consumer pipeline for TMA loads (sm90), over CCCL's cuda::ptx.
// A stage's "full" barrier completes when its TMA bytes have landed (one producer arrival with
// expect-tx); its "empty" barrier completes when every consumer has released it. Phases alternate;
// a fresh barrier counts as having completed the phase of parity 1, so the producer's first wait on
// an empty barrier (parity 1) passes at once.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace flashattn::sm90 {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) { cuda::ptx::mbarrier_init(bar, arrivals); }

// Makes initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void fence_barrier_init() {
  cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, bar, bytes);
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) { cuda::ptx::mbarrier_arrive(bar); }

__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef FLASHATTN_HANG_TRAP
  // Each failed try_wait suspends the thread for a while; 2^26 of them is seconds, longer than any
  // correct pipeline waits. No printf: it would cost the kernel a stack frame; the launch fails
  // with an illegal-instruction error instead.
  uint32_t tries = 0;
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
    if (++tries == (1u << 26)) __trap();
  }
#else
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
#endif
}

// Position in a ring of kStages stages: the stage index and the parity of its current phase.
template <int kStages>
struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;
  // The state of a ring's use number `index` (0-based): a loop can derive it from its counter
  // instead of carrying one more state in registers.
  static __device__ __forceinline__ PipelineState at(uint32_t index) { return {int(index % kStages), (index / kStages) & 1u}; }
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

template <int kStages>
struct Pipeline {
  uint64_t full[kStages];
  uint64_t empty[kStages];

  // One thread: full barriers take the producer's single arrival, empty ones every consumer's.
  __device__ __forceinline__ void init(uint32_t consumer_arrivals) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], consumer_arrivals);
    }
    fence_barrier_init();
  }
  // Producer: wait until the stage is free, then announce the bytes its TMA loads will bring.
  __device__ __forceinline__ void producer_acquire(const PipelineState<kStages>& s, uint32_t bytes) {
    mbarrier_wait(&empty[s.stage], s.phase ^ 1u);
    mbarrier_arrive_expect_tx(&full[s.stage], bytes);
  }
  __device__ __forceinline__ void consumer_wait(const PipelineState<kStages>& s) { mbarrier_wait(&full[s.stage], s.phase); }
  __device__ __forceinline__ void consumer_release(const PipelineState<kStages>& s) { mbarrier_arrive(&empty[s.stage]); }
};

}  // namespace flashattn::sm90
