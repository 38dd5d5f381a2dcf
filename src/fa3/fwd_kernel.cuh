// FlashAttention-3 forward (sm90a): TMA loads on an mbarrier pipeline, wgmma, warp specialisation,
// intra-warpgroup overlap of softmax with the GEMMs and ping-pong between the consumer warpgroups.
// Persistent: one CTA per SM walks the work tiles, in a static or dynamic order (fwd_scheduler.cuh).
//
// CTA = 1 + kConsumers warpgroups: warpgroup 0 is the producer (one thread issues the TMA loads of
// Q per work tile and K, V per key tile into kStages rings); warpgroups 1.. are consumers, 64 query
// rows each (kBlockM = 64 kConsumers). Shared memory holds every tile as 64-element (128-byte)
// column blocks in the 128-byte swizzle the TMA writes: Q [d/64][kBlockM rows][64], K and V [stage][d/64][kBlockN][64].
// A consumer computes S = Q K^T (wgmma, both operands in shared memory, K-major), the masked online
// softmax in registers, then O += P V with P as the register A operand and V MN-major. The
// epilogue stages O in shared memory for a TMA store (FwdMaps::o_by_tma), or stores it from
// registers.
//
// The roles: fwd_producer.cuh (work tiles and loads), fwd_consumer.cuh (the mainloop),
// fwd_epilogue.cuh (O and the LSE); fwd_smem.cuh (the shared-memory layout), fwd_config.h.
// fp8 (Fp8FwdConfig, fp8_fwd_config.h): the same roles on e4m3 wgmmas, and warps 1..3 of the
// producer warpgroup transpose each V tile for the P V GEMM (fwd_transpose.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "common/problem.h"
#include "fa3/fwd_config.h"
#include "fa3/fwd_consumer.cuh"
#include "fa3/fwd_producer.cuh"
#include "fa3/fwd_scheduler.cuh"
#include "fa3/fwd_smem.cuh"
#include "fa3/fwd_transpose.cuh"

namespace flashattn::fa3 {

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdMaps maps, const AttnProblem p, const FwdGrid grid) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Each consumer warp releases a stage (after its wgmma wait, so all its lanes are done with it).
  constexpr uint32_t kConsumerWarps = 4 * Config::kConsumers;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int tile_slots[3];
  const FwdSmem<Config> sm(reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)),
                           tile_slots);
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    sm.pipeline_k->init(kConsumerWarps);
    if constexpr (Config::kFp8) {
      // V stages are read by the transposing warps (every lane arrives on empty); their Vt
      // stages (one arrival per transposing warp on full) by the consumers.
      sm.pipeline_v->init(32 * Config::kTransposeWarps);
      for (int s = 0; s < Config::kStages; ++s) {
        sm90::mbarrier_init(&sm.pipeline_vt->full[s], Config::kTransposeWarps);
        sm90::mbarrier_init(&sm.pipeline_vt->empty[s], kConsumerWarps);
      }
    } else {
      sm.pipeline_v->init(kConsumerWarps);
    }
    sm90::mbarrier_init(sm.q_full, 1);
    // Every consumer thread arrives on Q empty (not one per warp): each reader of the tile slot
    // releases it itself, and the producer rewrites the slot only after that barrier.
    sm90::mbarrier_init(sm.q_empty, 128 * Config::kConsumers);
    sm90::mbarrier_init(sm.o_empty, 1);
    sm90::fence_barrier_init();
  }
  __syncthreads();
  if (warpgroup == 0) {
    sm90::warpgroup_registers_decrease<Config::kProducerRegisters>();
    if constexpr (Config::kFp8) {
      if (threadIdx.x >= 32) {
        fwd_transpose_v<Config>(sm, int(threadIdx.x) / 32 - 1);
        return;
      }
    }
    if (threadIdx.x == 0) fwd_produce<Config>(maps, p, grid, sm);
    return;
  }
  sm90::warpgroup_registers_increase<Config::kConsumerRegisters>();
  fwd_consume<Config>(maps, p, grid, sm);
#endif
}

}  // namespace flashattn::fa3
