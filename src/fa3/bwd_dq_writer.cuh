// The FA3 backward's dQ writers: warps 1 and 2 of the producer warpgroup, writer warp 1 + c for
// consumer warpgroup c. Per step that consumer stages its fp32 dQ chunk in shared memory and its
// writer adds it to the workspace with one bulk reduction (cp.reduce.async.bulk), so the
// consumers never wait for global memory. In the deterministic mode a writer first waits until
// the key blocks before this one (bwd_add_rank) have added to the row block, and counts its own
// add once it is complete. One warp per consumer buffer: a deterministic add's wait for its
// completion and the release of its count then overlap the other buffer's add, instead of
// serialising every chunk of the CTA behind one warp.
//
// Hand-over through named barriers of 128 consumer + 32 writer threads: kDqFull + c (chunk c
// staged: the consumer arrives, writer c syncs) and kDqEmpty + c (its reads done: writer c
// arrives, the consumer syncs before its next chunk). Writer c arrives on kDqEmpty + c once
// before its first step and after every step of its but the last, so arrivals and syncs pair up
// exactly. With the alternate dQ (BwdConfig::kDqAlternate) consumer c computes the whole chunk of
// steps c, c + 2, ... only, and so writer c handles those steps.
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
// Wide kernels (BwdConfig::kWide), deterministic mode: the consumers add dQ themselves; writer 0
// lets them start a step's adds (go: the key blocks before have added; consumers sync, writer 0
// arrives), writer 1 counts the step once they have issued them (done: consumers arrive, writer 1
// syncs) and then lets writer 0 on to the next step's go (next: writer 1 arrives, writer 0 syncs).
// One waiting side per barrier, and no side arrives twice at one before the other side's wait.
inline constexpr uint32_t kBwdDqGoBarrier = 2, kBwdDqNextBarrier = 3, kBwdDqDoneBarrier = 4;
inline constexpr uint32_t kBwdDqOrderThreads = 256 + 32, kBwdDqNextThreads = 64;

// The row block a step adds to, walked as bwd_for_each_step walks them (query head g of the GQA
// group outer, row block m inner from m_first round) without a division per step: m, and the row
// block's first 64-row slab of the workspaces ((sequence x query heads + head) x rows_padded / 64
// + m x kSlabs: its dQ chunks' and its semaphore's index). A row block is kSlabs = kBlockM / 64
// slabs.
template <int kSlabs>
struct BwdRowCursor {
  int64_t slab;
  int m;
  __device__ __forceinline__ BwdRowCursor(const BwdArgs& args, const BwdBlock& blk)
      : slab((int64_t(blk.b) * args.problem.fwd.heads_q + blk.hk * blk.heads_per_group) * (args.rows_padded / 64) +
             int64_t(blk.m_first) * kSlabs),
        m(blk.m_first) {}
  // `steps` steps on. A query head's walk ends where it began: back at m_first, the next query
  // head's rows start rows_padded / 64 slabs on.
  __device__ __forceinline__ void advance(const BwdArgs& args, const BwdBlock& blk, int steps) {
#pragma unroll 1
    for (; steps > 0; --steps) {
      const int next = blk.next_row_block(m);
      slab += int64_t(next - m) * kSlabs + (next == blk.m_first ? args.rows_padded / 64 : 0);
      m = next;
    }
  }
};

// Deterministic mode, one lane: the count a writer waits for before adding to a row block. Each
// key block counts kCounts per row block (one per writer warp that adds to it); with chunks that
// add to the same elements (kDqSplitKeys) chunk c also waits for this block's chunks before it.
template <typename Config>
__device__ __forceinline__ int bwd_dq_turn(const BwdArgs& args, const BwdBlock& blk, int m, int c) {
  constexpr int kCounts = Config::kDqAlternate || Config::kWide ? 1 : Config::kConsumers;
  const int rank = bwd_add_rank<Config::kBlockM, Config::kBlockN>(args.problem.fwd.mask, blk, m * Config::kBlockM, args.descending);
  return rank * kCounts + (Config::kDqSplitKeys ? c : 0);
}

// One lane: a strong read of a count, issued early so that its latency overlaps other waits. It
// acquires only together with a later fence (bwd_release_count's): a relaxed read followed by a
// fence is an acquire pattern.
__device__ __forceinline__ int bwd_peek_count(const int* counter) {
  int value;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// One lane, after the barrier that ordered this CTA's adds before it: count them.
__device__ __forceinline__ void bwd_release_count(int* counter) {
  __threadfence();
  gpu::bwd_signal_counter(counter);
}

// Writer warp c: the chunks of consumer warpgroup c, each added with one bulk reduction.
template <typename Config>
__device__ __forceinline__ void bwd_write_dq_chunks(const BwdArgs& args, const BwdBlock& blk, uint32_t stage_addr, int c) {
  constexpr int kStride = Config::kDqAlternate ? 2 : 1;  // this writer's steps: c, c + 2, ... or all
  const int lane = threadIdx.x % 32;
  const int steps = blk.steps();
  const int first = Config::kDqAlternate ? c : 0;
  if (first >= steps) return;
  // This chunk's place in a row block: rows 64 qb, columns cb * kDqCols (bwd_config.h).
  const int qb = Config::kDqOneChunk ? 0 : c / Config::kDqColChunks, cb = Config::kDqOneChunk ? 0 : c % Config::kDqColChunks;
  int peeked = -1;  // deterministic mode: the next step's count, read before the last release
  BwdRowCursor<Config::kDqRowBlocks> at(args, blk);
  at.advance(args, blk, first);
  sm90::named_barrier_arrive_of<kBwdDqEmptyBarrier, kBwdDqBarrierThreads>(c);
  for (int step = first; step < steps; step += kStride) {
    int* semaphore = args.dq_semaphores + at.slab;  // (deterministic mode only)
    if (args.deterministic) {
      if (lane == 0) {
        const int turn = bwd_dq_turn<Config>(args, blk, at.m, c);
        if (peeked < turn) gpu::bwd_wait_counter(semaphore, turn);
        sm90::fence_async_global();  // the earlier blocks' adds, seen through the acquire, before ours
      }
      __syncwarp();
    }
    sm90::named_barrier_sync_of<kBwdDqFullBarrier, kBwdDqBarrierThreads>(c);
    if (lane == 0) {
      float* dst = args.dq_accum + dq_chunk_offset((at.slab + qb) * 64, cb * Config::kDqCols, Config::kDqCols, Config::kHeadDim);
      sm90::bulk_reduce_add(dst, reinterpret_cast<const float*>(__cvta_shared_to_generic(stage_addr)), Config::kDqBytes);
      sm90::tma_store_commit();
      sm90::tma_store_wait_read();
    }
    __syncwarp();
    const bool more = step + kStride < steps;
    if (more) sm90::named_barrier_arrive_of<kBwdDqEmptyBarrier, kBwdDqBarrierThreads>(c);
    at.advance(args, blk, kStride);
    if (args.deterministic) {
      if (lane == 0) {
        peeked = more ? bwd_peek_count(args.dq_semaphores + at.slab) : -1;
        sm90::tma_store_wait();  // the add complete in global memory
        bwd_release_count(semaphore);
      }
      __syncwarp();
    }
  }
  if (lane == 0) sm90::tma_store_wait();
}

// The wide kernels' dQ order (deterministic mode). Writer 0 (go): per step, wait until the row
// block's earlier key blocks have added, let the consumers add, and wait for writer 1's next
// before the next step's go (the consumers have then left this step's go). Writer 1: per step,
// once the consumers have issued their adds, let writer 0 on and count this block. Their
// reductions are released by writer 1's fence: the barrier orders them before it (cumulativity,
// as CUTLASS's GenericBarrier relies on), so the consumers never wait for their own adds, and the
// release runs beside the next step's wait.
template <typename Config>
__device__ __forceinline__ void bwd_order_dq_wide(const BwdArgs& args, const BwdBlock& blk, int c) {
  const int lane = threadIdx.x % 32;
  const int steps = blk.steps();
  BwdRowCursor<Config::kDqRowBlocks> at(args, blk);
  for (int step = 0; step < steps; ++step, at.advance(args, blk, 1)) {
    if (c == 0) {
      if (lane == 0) gpu::bwd_wait_counter(args.dq_semaphores + at.slab, bwd_dq_turn<Config>(args, blk, at.m, 0));
      __syncwarp();
      sm90::named_barrier_arrive(kBwdDqGoBarrier, kBwdDqOrderThreads);
      sm90::named_barrier_sync(kBwdDqNextBarrier, kBwdDqNextThreads);
    } else {
      sm90::named_barrier_sync(kBwdDqDoneBarrier, kBwdDqOrderThreads);
      sm90::named_barrier_arrive(kBwdDqNextBarrier, kBwdDqNextThreads);
      if (lane == 0) bwd_release_count(args.dq_semaphores + at.slab);
      __syncwarp();
    }
  }
}

// Writer warp c's whole part (c = warp - 1 of the producer warpgroup), for a block with steps
// (bwd_kernel).
template <typename Config>
__device__ __forceinline__ void bwd_write_dq(const BwdArgs& args, const BwdBlock& blk, uint32_t dq_stage_addr, int c) {
  static_assert(Config::kConsumers == 2, "the barrier ids above");
  if constexpr (Config::kWide) {  // the consumers add dQ themselves
    if (args.deterministic) bwd_order_dq_wide<Config>(args, blk, c);
  } else {
    bwd_write_dq_chunks<Config>(args, blk, dq_stage_addr + c * Config::kDqBytes, c);
  }
}

}  // namespace flashattn::fa3
