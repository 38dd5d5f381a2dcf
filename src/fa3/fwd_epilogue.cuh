// The FA3 forward's epilogue of one work tile: normalise O, write it (TMA stores from a staging
// area in the V ring, or from registers) and the LSE. fp8: O also times the tile's v_descale,
// written in Config::OutElement; the LSE undoes the softmax scale's descales and P's shift.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "arch/sm80/mma.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "common/problem.h"
#include "fa3/fp8_descale.cuh"
#include "fa3/fwd_config.h"
#include "fa3/fwd_scheduler.cuh"
#include "fa3/fwd_smem.cuh"
#include "fa3/fwd_softmax.cuh"

namespace flashattn::fa3 {

// `done`: the CTA's tiles so far, this one included; `sq`: its sequence's query rows; `at`: where
// this thread's accumulators sit; `v_addr`: the V ring (O's staging area is its last kOBytes).
template <typename Config>
__device__ __forceinline__ void fwd_epilogue(const FwdMaps& maps, const AttnProblem& p, const FwdGrid& grid, const FwdSmem<Config>& sm,
                                             uint32_t done, const float (&o)[Config::kHeadDimV / 2], const float (&row_max)[2],
                                             float (&row_sum)[2], AccumulatorCoords at, int sq, int consumer, int warp, int lane,
                                             uint32_t v_addr) {
  using Element = typename Config::OutElement;
  constexpr int kBlockM = Config::kBlockM, kStages = Config::kStages;
  // O's 16-bit column blocks of 64 (not the V tiles' blocks: fp8 V has 128 per 128-byte row).
  constexpr int kHeadDimV = Config::kHeadDimV, kOColumnBlocks = kHeadDimV / 64;
  constexpr int kORegs = kHeadDimV / 2;
  constexpr uint32_t kConsumerThreads = 128 * Config::kConsumers, kEpilogueBarrier = kFwdEpilogueBarrier;
  uint64_t* o_empty = sm.o_empty;
  auto tile_slot = [&](uint32_t n) { return sm.tile_slot(n); };
  // Epilogue: normalise, write O (two elements per store) and the LSE. The sequence and head
  // come again from the tile's slot: keeping them from the top of the tile costs the widest
  // configurations a spill.
  const TileHead head = tile_head(grid, sm90::ld_shared_s32(tile_slot(done - 1)));
  const int b_out = head.b, h_out = head.h;
  Element* out = static_cast<Element*>(p.out.data);
  // Each row's sum (the quad's four parts) and its normaliser; 0 for a row that saw no key.
  float inv[2];
  bool empty[2];
  // fp8: O of the dequantised V is v_descale times O of the stored one.
  const float out_scale = [&] {
    if constexpr (Config::kFp8) return v_descale_of(p, b_out, h_out);
    else return 1.f;
  }();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    empty[r] = row_max[r] == -INFINITY || row_sum[r] == 0.f;
    if constexpr (Config::kFp8) inv[r] = empty[r] ? 0.f : out_scale / row_sum[r];
    else inv[r] = empty[r] ? 0.f : 1.f / row_sum[r];
  }
  if (maps.o_by_tma) {
    // Every warpgroup's last P V is done, so the V ring is read (by P V, or fp8: by the
    // transposing warps, before the Vt stages P V waited for); then the block's rows, staged by every
    // warpgroup, go out in one store per column block (rows past the sequence are clipped by
    // the map) from one thread, which releases the staging area to the producer once the
    // stores have read it. That thread's read wait also orders the next tile's staging after
    // these stores when no V load comes between (a tile without keys): keep it before the
    // next epilogue barrier.
    const uint32_t o_tile = v_addr + uint32_t(kStages * Config::kVBytes - Config::kOBytes);
    sm90::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);
    sm90::store_accumulators_sw128<Element, kHeadDimV, true, kBlockM * 128>(o_tile + consumer * 64 * 128, o, inv, warp, lane);
    sm90::fence_async_shared();
    sm90::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);
    if (threadIdx.x == 128) {
      for (int c = 0; c < kOColumnBlocks; ++c)
        sm90::tma_store_4d(&maps.o, reinterpret_cast<const void*>(__cvta_shared_to_generic(o_tile + c * kBlockM * 128)), 64 * c,
                           h_out, (grid.row_blocks.divisor - 1 - head.rank) * kBlockM, b_out);
      sm90::tma_store_commit();
      sm90::tma_store_wait_read();
      sm90::mbarrier_arrive(o_empty);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = at.row0 + 8 * r;
    if (row >= sq) continue;
    if (!maps.o_by_tma) {
      Element* out_row = out + p.out.offset(b_out, row, h_out);
#pragma unroll
      for (int i = 0; i < kORegs; i += 4) {
        const int col = 8 * (i / 4) + 2 * at.quad;
        if (col < p.head_dim_v)
          *reinterpret_cast<uint32_t*>(out_row + col) = sm80::pack2<Element>(o[i + 2 * r] * inv[r], o[i + 2 * r + 1] * inv[r]);
      }
    }
    // The running max is in exp2 units (fwd_softmax.cuh); the row sum carries fp8's 2^kPShift.
    constexpr float kLn2 = 0.6931471805599453f;
    if (at.quad == 0 && p.lse.defined())
      p.lse.data[p.lse.offset(b_out, row, h_out)] = empty[r] ? -INFINITY : (row_max[r] - float(Config::kPShift)) * kLn2 + logf(row_sum[r]);
  }
}

}  // namespace flashattn::fa3
