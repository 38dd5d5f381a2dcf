// The FA3 backward's dQ writer (warp 1 of the producer warpgroup): per step, each consumer
// warpgroup stages its fp32 dQ chunk in shared memory and the writer adds it to the workspace with
// one bulk reduction (cp.reduce.async.bulk), so the consumers never wait for global memory. In the
// deterministic mode it first waits until the key blocks before this one (bwd_add_rank) have added
// to the row block, and counts its own adds once they are complete.
//
// Hand-over through named barriers of 128 consumer + 32 writer threads: kDqFull + c (chunk c
// staged: the consumers arrive, the writer syncs) and kDqEmpty + c (its reads done: the writer
// arrives, the consumers sync before the next chunk). The writer arrives on kDqEmpty once before
// the first step and after every step but the last, so arrivals and syncs pair up exactly. With
// the alternate dQ (BwdConfig::kDqAlternate) chunk c comes from steps c, c + 2, ... only
// (bwd_write_dq_alternate).
#pragma once

#include <cstdint>

#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "cuda/ordered_adds.cuh"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/bwd_dq_layout.h"

namespace flashattn::fa3 {

inline constexpr uint32_t kBwdDqFullBarrier = 2, kBwdDqEmptyBarrier = 4, kBwdDqBarrierThreads = 128 + 32;
// Wide kernels (BwdConfig::kWide), deterministic mode: the consumers add dQ themselves; the
// writer warp orders them (go: the key blocks before have added; done: this CTA's adds fenced).
inline constexpr uint32_t kBwdDqGoBarrier = 2, kBwdDqDoneBarrier = 4, kBwdDqOrderThreads = 256 + 32;

// The wide kernels' dQ order (deterministic mode), in the writer warp: per step, wait for the row
// block's earlier key blocks, let the consumers add, and count this block once they are done.
template <typename Config>
__device__ __forceinline__ void bwd_order_dq_wide(const BwdArgs& args, const BwdBlock& blk) {
  const AttnProblem& p = args.problem.fwd;
  const int lane = threadIdx.x % 32;
  auto order_step = [&](int64_t bh, int m) {
    int* semaphore = args.dq_semaphores + bh * (args.rows_padded / 64) + m;
    if (lane == 0) gpu::bwd_wait_counter(semaphore, bwd_add_rank<Config::kBlockM, Config::kBlockN>(p.mask, blk, m * Config::kBlockM, args.descending));
    __syncwarp();
    sm90::named_barrier_arrive(kBwdDqGoBarrier, kBwdDqOrderThreads);
    sm90::named_barrier_sync(kBwdDqDoneBarrier, kBwdDqOrderThreads);
    if (lane == 0) {
      __threadfence();  // the consumers' fenced adds, seen through the barrier, before the count moves
      gpu::bwd_signal_counter(semaphore);
    }
    __syncwarp();
  };
  for (int g = 0; g < blk.heads_per_group; ++g) {
    const int64_t bh = int64_t(blk.b) * p.heads_q + blk.hk * blk.heads_per_group + g;
    for (int m = blk.m_begin; m < blk.m_end; ++m) order_step(bh, m);
  }
}

// One staged chunk added to the workspace.
template <typename Config>
__device__ __forceinline__ void bwd_add_chunk(float* dst, uint32_t stage_addr) {
  const float* src = reinterpret_cast<const float*>(__cvta_shared_to_generic(stage_addr));
  sm90::bulk_reduce_add(dst, src, Config::kDqBytes);
}

// Deterministic mode, before a row block's add: the key blocks before this one have added.
template <typename Config>
__device__ __forceinline__ void bwd_wait_dq_turn(const BwdArgs& args, const BwdBlock& blk, int* semaphore, int row0, int lane) {
  if (lane == 0) {
    gpu::bwd_wait_counter(semaphore, bwd_add_rank<Config::kBlockM, Config::kBlockN>(args.problem.fwd.mask, blk, row0, args.descending));
    sm90::fence_async_global();  // the earlier blocks' adds, seen through the acquire, before ours
  }
  __syncwarp();
}

// Deterministic mode, after a row block's adds were issued: count this key block once they are complete.
__device__ __forceinline__ void bwd_signal_dq_done(int* semaphore, int lane) {
  if (lane == 0) {
    sm90::tma_store_wait();  // the adds complete in global memory
    __threadfence();
    gpu::bwd_signal_counter(semaphore);
  }
  __syncwarp();
}

// The alternate dQ's writer: one chunk per step, staged by warpgroup c = step % 2 in its buffer.
// Buffer c's kDqEmpty arrivals: once before warpgroup c's first step, then after each of its
// steps but its last (step + 2 >= steps), as many as the warpgroup's syncs.
template <typename Config>
__device__ __forceinline__ void bwd_write_dq_alternate(const BwdArgs& args, const BwdBlock& blk, uint32_t dq_stage_addr) {
  const AttnProblem& p = args.problem.fwd;
  const int lane = threadIdx.x % 32;
  const int steps = blk.steps();
  sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 0, kBwdDqBarrierThreads);
  if (steps > 1) sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 1, kBwdDqBarrierThreads);
  int step = 0;
  for (int g = 0; g < blk.heads_per_group; ++g) {
    const int64_t bh = int64_t(blk.b) * p.heads_q + blk.hk * blk.heads_per_group + g;
    for (int m = blk.m_begin; m < blk.m_end; ++m, ++step) {
      const int row0 = m * Config::kBlockM;
      int* semaphore = args.dq_semaphores + bh * (args.rows_padded / 64) + m;
      if (args.deterministic) bwd_wait_dq_turn<Config>(args, blk, semaphore, row0, lane);
      const bool odd = step & 1;
      if (odd) sm90::named_barrier_sync(kBwdDqFullBarrier + 1, kBwdDqBarrierThreads);
      else sm90::named_barrier_sync(kBwdDqFullBarrier + 0, kBwdDqBarrierThreads);
      if (lane == 0) {
        float* dst = args.dq_accum + dq_chunk_offset(bh * args.rows_padded + row0, 0, Config::kDqCols, Config::kHeadDim);
        bwd_add_chunk<Config>(dst, dq_stage_addr + odd * Config::kDqBytes);
        sm90::tma_store_commit();
        sm90::tma_store_wait_read();
      }
      __syncwarp();
      if (step + 2 < steps) {
        if (odd) sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 1, kBwdDqBarrierThreads);
        else sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 0, kBwdDqBarrierThreads);
      }
      if (args.deterministic) bwd_signal_dq_done(semaphore, lane);
    }
  }
  if (lane == 0) sm90::tma_store_wait();
}

template <typename Config>
__device__ __forceinline__ void bwd_write_dq(const BwdArgs& args, const BwdBlock& blk, uint32_t dq_stage_addr) {
  static_assert(Config::kConsumers == 2, "the barrier ids below");
  constexpr int kBlockM = Config::kBlockM;
  const AttnProblem& p = args.problem.fwd;
  const int lane = threadIdx.x % 32;
  const int steps = blk.steps();
  if (steps == 0) return;
  if constexpr (Config::kWide) {  // the consumers add dQ themselves
    if (args.deterministic) bwd_order_dq_wide<Config>(args, blk);
    return;
  }
  if constexpr (Config::kDqAlternate) {
    bwd_write_dq_alternate<Config>(args, blk, dq_stage_addr);
    return;
  }
  sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 0, kBwdDqBarrierThreads);
  sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 1, kBwdDqBarrierThreads);
  int step = 0;
  for (int g = 0; g < blk.heads_per_group; ++g) {
    const int64_t bh = int64_t(blk.b) * p.heads_q + blk.hk * blk.heads_per_group + g;
    for (int m = blk.m_begin; m < blk.m_end; ++m, ++step) {
      const int row0 = m * kBlockM;
      int* semaphore = args.dq_semaphores + bh * (args.rows_padded / 64) + m;
      if (args.deterministic) bwd_wait_dq_turn<Config>(args, blk, semaphore, row0, lane);
      const int64_t ws_row = bh * args.rows_padded + row0;
#pragma unroll
      for (int c = 0; c < Config::kConsumers; ++c) {
        if (c == 0) sm90::named_barrier_sync(kBwdDqFullBarrier + 0, kBwdDqBarrierThreads);
        else sm90::named_barrier_sync(kBwdDqFullBarrier + 1, kBwdDqBarrierThreads);
        if (lane == 0) {
          // (split by keys: both chunks add to the same rows; in the deterministic mode the first
          // add completes before the second starts, so the order is fixed)
          if (Config::kDqSplitKeys && c > 0 && args.deterministic) sm90::tma_store_wait();
          const int qb = Config::kDqSplitKeys ? 0 : c / Config::kDqColChunks, cb = Config::kDqSplitKeys ? 0 : c % Config::kDqColChunks;
          float* dst = args.dq_accum + dq_chunk_offset(ws_row + 64 * qb, cb * Config::kDqCols, Config::kDqCols, Config::kHeadDim);
          bwd_add_chunk<Config>(dst, dq_stage_addr + c * Config::kDqBytes);
          sm90::tma_store_commit();
        }
      }
      const bool last = step + 1 == steps;
      if (lane == 0) sm90::tma_store_wait_read_pending<1>();
      __syncwarp();
      if (!last) sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 0, kBwdDqBarrierThreads);
      if (lane == 0) sm90::tma_store_wait_read_pending<0>();
      __syncwarp();
      if (!last) sm90::named_barrier_arrive(kBwdDqEmptyBarrier + 1, kBwdDqBarrierThreads);
      if (args.deterministic) bwd_signal_dq_done(semaphore, lane);
    }
  }
  if (lane == 0) sm90::tma_store_wait();
}

}  // namespace flashattn::fa3
