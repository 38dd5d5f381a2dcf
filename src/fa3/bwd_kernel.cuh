// FlashAttention-3 backward main kernel (sm90a): TMA loads on mbarrier rings, wgmma, warp
// specialisation. The roles: bwd_block.cuh (the CTA's work), bwd_producer.cuh (loads),
// bwd_dq_writer.cuh (dQ bulk reductions, warps 1 and 2), bwd_consumer.cuh (the GEMMs, P and dS;
// head dims over 128: bwd_consumer_wide.cuh, or with rows on M bwd_consumer_rows.cuh),
// bwd_step_math.cuh (what the consumers share), bwd_epilogue.cuh (dK/dV out). The preprocess
// (D, LSE * log2 e) is cuda/bwd_row_stats.cuh; the dQ conversion bwd_launch.cu.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/bwd_consumer.cuh"
#include "fa3/bwd_consumer_rows.cuh"
#include "fa3/bwd_consumer_wide.cuh"
#include "fa3/bwd_dq_writer.cuh"
#include "fa3/bwd_producer.cuh"

namespace flashattn::fa3 {

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, 1) bwd_kernel(const __grid_constant__ BwdMaps maps, const BwdArgs args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const BwdSmem<Config> sm{reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
  // Each role forms the CTA's work after its register reallocation (values live across the
  // producer warpgroup's decrease would be spilled), from coordinates thread 0 leaves in shared
  // memory: the section order's arithmetic runs once.
  const BwdCoords coords = bwd_coords(args.section_shift, args.heads_k_divmod, args.descending);
  auto block = [&] {
    return bwd_block<Config::kBlockM, Config::kBlockN>(args.problem.fwd, args.rows_padded, sm.coords(), args.row_stagger_shift);
  };
  if (!bwd_block<Config::kBlockM, Config::kBlockN>(args.problem.fwd, args.rows_padded, coords, args.row_stagger_shift).exists())
    return;  // past this (varlen) sequence's keys: every thread leaves
  if (threadIdx.x == 0) {
    sm.store_coords(coords);
    sm90::mbarrier_init(sm.kv_full(), 1);
    // Every consumer thread releases a stage after its own reads of it (LSE, D), so that the
    // reads are ordered before the producer's next loads without a warp-level hand-over.
    sm.q_ring()->init(128 * Config::kConsumers);
    sm.do_ring()->init(128 * Config::kConsumers);
  }
  __syncthreads();
  const int warpgroup = int(threadIdx.x / 128);
  if (warpgroup == 0) {
    sm90::warpgroup_registers_decrease<Config::kProducerRegisters>();
    // The producer (thread 0) and the dQ writers (warps 1 and 2) form the CTA's work once, then
    // take their role; the rest leave. (Formed in each role's branch, or with the writers' test
    // after the producer's branch, ptxas spilled the 128-row kernels, consumers included.)
    const int warp = int(threadIdx.x / 32);
    if (warp > 2 || (warp == 0 && threadIdx.x != 0)) return;
    const BwdBlock blk = block();
    if (blk.steps() == 0) return;
    if (warp == 0) bwd_produce<Config>(maps, args, blk, sm);
    else bwd_write_dq<Config>(args, blk, sm.addr(Config::kOffsetDq), warp - 1);
    return;
  }
  sm90::warpgroup_registers_increase<Config::kConsumerRegisters>();
  if constexpr (Config::kRowsOnM) bwd_consumer_rows<Config>(maps, args, block(), sm);
  else if constexpr (Config::kWide) bwd_consumer_wide<Config>(maps, args, block(), sm);
  else bwd_consumer<Config>(maps, args, block(), sm);
#endif
}

}  // namespace flashattn::fa3
