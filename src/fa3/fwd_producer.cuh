// The FA3 forward's producer (one thread): picks the work tiles (fwd_scheduler.cuh), publishes
// each in a tile slot with its Q, and TMA-loads K and V of its key tiles into their rings. With
// fp8 the V ring is the transposing warps' input (fwd_transpose.cuh): each V stage also carries
// the count of its keys in the sequence, and after the last tile a stage with -1 stops them.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "common/problem.h"
#include "fa3/fwd_config.h"
#include "fa3/fwd_scheduler.cuh"
#include "fa3/fwd_smem.cuh"

namespace flashattn::fa3 {

// `done` counts this CTA's tiles (the phase of the Q barriers) and `uses` the K/V ring uses before
// the current tile (each key tile is one K and one V).
template <typename Config>
__device__ __forceinline__ void fwd_produce(const FwdMaps& maps, const AttnProblem& p, const FwdGrid& grid, const FwdSmem<Config>& sm) {
  using Element = typename Config::Element;
  using State = sm90::PipelineState<Config::kStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kStages = Config::kStages;
  constexpr int kColumnBlocks = Config::kColumnBlocks, kColumnBlocksV = Config::kColumnBlocksV;
  constexpr int kQKBlockCols = Config::kQKBlockCols, kVBlockCols = Config::kVBlockCols;
  Element* smem_q = sm.q;
  Element* smem_k = sm.k;
  Element* smem_v = sm.v;
  auto* pipeline_k = sm.pipeline_k;
  auto* pipeline_v = sm.pipeline_v;
  uint64_t* q_full = sm.q_full;
  uint64_t* q_empty = sm.q_empty;
  uint64_t* o_empty = sm.o_empty;
  auto tile_slot = [&](uint32_t n) { return sm.tile_slot(n); };
  // Varlen: the maps span all rows (batch extent 1); sequence b starts at row cu_seqlens[b].
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  uint32_t done = 0, uses = 0;  // as the consumers count them
  // (fp8: the grid size read again each time; held in a register it costs the producer a spill.)
  for (int n = blockIdx.x;; n = next_work_tile<Config::kFp8>(grid, n)) {  // n: position in the order
    // Slot done % 2 is free once every consumer thread has released the previous tile's Q: its
    // last reader was the epilogue of the tile before that one.
    if (n >= grid.work_tiles) {  // no tile left: the consumers read -1
      sm90::mbarrier_wait(q_empty, (done & 1u) ^ 1u);
      sm90::st_shared_s32(tile_slot(done), -1);
      sm90::mbarrier_arrive(q_full);
      if constexpr (Config::kFp8) {  // and so do the transposing warps, in the next V stage
        const State st = State::at(uses);
        sm90::mbarrier_wait(&pipeline_v->empty[st.stage], st.phase ^ 1u);
        sm90::st_shared_s32(sm90::smem_u32(&sm.v_keys[st.stage]), -1);
        sm90::mbarrier_arrive(&pipeline_v->full[st.stage]);
      }
      break;
    }
    const int w = grid.section_shift > 0 ? scheduled_tile(grid, n) : n;
    const WorkTile wt = work_tile<kBlockM, kBlockN, Config::kFp8>(p, grid, w);
    if (!wt.valid) continue;
    sm90::mbarrier_wait(q_empty, (done & 1u) ^ 1u);
    // The previous tile's O staged in the V ring must have been read by its stores before this
    // tile's first V load (below). Every phase of that barrier is waited, a tile without keys
    // included (compute-sanitizer synccheck: "missing wait"); for such a tile the wait comes
    // before it is published, or its own epilogue could complete the next phase first.
    const bool o_staging_busy = maps.o_by_tma && done > 0;
    if (o_staging_busy && wt.tile_begin == wt.tile_end) sm90::mbarrier_wait(o_empty, (done - 1) & 1u);
    sm90::st_shared_s32(tile_slot(done), w);
    if constexpr (Config::kFp8) sm90::st_shared_s32(sm.producer_keys_slot(), wt.sk);
    const int q_first = varlen ? p.lens.cu_seqlens_q[wt.b] : 0;
    const int k_first = varlen ? p.lens.cu_seqlens_k[wt.b] : 0;
    const int batch_coord = varlen ? 0 : int(wt.b);
    const int hk = grid.group.div(wt.h);
    // A box partly out of bounds (last Q block, last K/V tile) still completes its full byte
    // count (zero-filled), so the expect-tx counts are constants (verified on the H200).
    sm90::mbarrier_arrive_expect_tx(q_full, Config::kQBytes);
    for (int c = 0; c < kColumnBlocks; ++c)
      sm90::tma_load_4d(smem_q + c * kBlockM * kQKBlockCols, &maps.q, kQKBlockCols * c, int(wt.h), q_first + wt.row0, batch_coord,
                        q_full);
    // The consumers need K of tile n + 1 before V of tile n (they issue S_{n+1} then P_n V_n),
    // so V trails K by one tile: K0, K1, V0, K2, V1, ...
    // Column blocks of block_cols elements (a row of the swizzle each).
    auto load_tile = [&](sm90::Pipeline<kStages>* pipe, Element* ring, const CUtensorMap* map, int column_blocks, int block_cols,
                         int tile, bool is_v) {
      const State st = State::at(uses + uint32_t(tile - wt.tile_begin));
      const int elements = column_blocks * kBlockN * block_cols;
      if constexpr (Config::kFp8) {
        sm90::mbarrier_wait(&pipe->empty[st.stage], st.phase ^ 1u);
        if (is_v) {
          // Only the last key tile can be partial. Its key count comes back from shared memory:
          // kept in a register from the top of the tile it costs the 24-register producer a spill.
          int keys = kBlockN;
          if (tile == wt.tile_end - 1) keys = sm90::ld_shared_s32(sm.producer_keys_slot()) - tile * kBlockN;
          sm90::st_shared_s32(sm90::smem_u32(&sm.v_keys[st.stage]), keys);
        }
        sm90::mbarrier_arrive_expect_tx(&pipe->full[st.stage], uint32_t(elements * sizeof(Element)));
      } else {
        pipe->producer_acquire(st, elements * sizeof(Element));
      }
      Element* dst = ring + st.stage * elements;
      for (int c = 0; c < column_blocks; ++c)
        sm90::tma_load_4d(dst + c * kBlockN * block_cols, map, block_cols * c, hk, k_first + tile * kBlockN, batch_coord,
                          &pipe->full[st.stage]);
    };
    if (wt.tile_begin < wt.tile_end) load_tile(pipeline_k, smem_k, &maps.k, kColumnBlocks, kQKBlockCols, wt.tile_begin, false);
    for (int tile = wt.tile_begin; tile < wt.tile_end; ++tile) {
      if (tile + 1 < wt.tile_end) load_tile(pipeline_k, smem_k, &maps.k, kColumnBlocks, kQKBlockCols, tile + 1, false);
      // (The barrier is at most one phase behind: the Q-empty wait above came after the
      // arrival of the epilogue before the previous one, and this tile's epilogue needs this V.)
      if (tile == wt.tile_begin && o_staging_busy) sm90::mbarrier_wait(o_empty, (done - 1) & 1u);
      load_tile(pipeline_v, smem_v, &maps.v, kColumnBlocksV, kVBlockCols, tile, true);
    }
    uses += uint32_t(wt.tile_end - wt.tile_begin);
    ++done;
  }
}

}  // namespace flashattn::fa3
