// Work of the FA3 forward: a work tile is one kBlockM-row block of one (sequence, query head). The
// producer thread picks the tiles and publishes each to the consumers (see the kernel's tile slot).
// CTA c takes tile c first, then
//   - static order (tile_counter null): c + gridDim.x, c + 2 gridDim.x, ...: a CTA per tile
//     (gridDim.x = work_tiles: the loop runs once), or persistent CTAs over tiles that are all
//     alike (dense, unmasked), where a stride balances;
//   - dynamic order (tile_counter set, zero at launch): gridDim.x + atomicAdd(tile_counter, 1), the
//     next tile not yet taken, as soon as the CTA is about to finish one. Persistent CTAs over
//     tiles of unequal length (causal, windowed, varlen) then balance like a CTA-per-tile launch
//     does (an SM that frees up takes the next tile) and still overlap the next tile's Q and K
//     loads with the last P V and the epilogue of the current one.
#pragma once

#include <cstdint>

#include "common/fast_divmod.h"
#include "common/mask.h"
#include "common/problem.h"
#include "fa3/tile_order.h"

namespace flashattn::fa3 {

// The divisors of a tile's coordinates as multiply-high-and-shift divisions (common/fast_divmod.h):
// the tile decode runs once per work tile in every consumer thread and in the producer, where
// integer divisions cost about twenty instructions each.
struct FwdGrid {
  FastDivmod row_blocks;  // kBlockM-row blocks of the longest query sequence
  FastDivmod heads_q;     // query heads
  FastDivmod group;       // query heads per kv head
  int work_tiles;         // row_blocks * heads_q * batch (fa3::check keeps it below 2^30: w + gridDim.x fits)
  int* tile_counter;      // dynamic order: tiles taken past the first wave; null: static order
  int section_shift;      // log2 of the (sequence, query head) pairs per section of the dynamic order
                          // (scheduled_tile); 2^section_shift divides heads_q * batch
};

// The static order's grid of a call with row_blocks blocks per (sequence, query head).
inline FwdGrid fwd_grid(const AttnProblem& p, int64_t row_blocks) {
  return {FastDivmod(int(row_blocks)), FastDivmod(int(p.heads_q)), FastDivmod(int(p.heads_q / p.heads_k)),
          int(row_blocks * p.heads_q * p.batch), nullptr, 0};
}

struct WorkTile {
  int b, h;
  int row0;                  // first query row of the block
  int sq, sk;                // this sequence's query and key lengths
  int tile_begin, tile_end;  // kBlockN-key tiles with a visible key; empty when equal
  bool valid;                // false: the block starts past this (varlen) sequence's end
};

// The tile a CTA takes after tile w (>= grid.work_tiles: none left). Called by the producer thread.
// kRereadGridSize: gridDim.x read from its special register at each call instead of being kept.
template <bool kRereadGridSize = false>
__device__ __forceinline__ int next_work_tile(const FwdGrid& grid, int w) {
  int ctas = int(gridDim.x);
  if constexpr (kRereadGridSize) asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(ctas));
  return grid.tile_counter != nullptr ? ctas + atomicAdd(grid.tile_counter, 1) : w + ctas;
}

// The (sequence, query head) of work tile w and its rank among that head's row blocks, counted
// from the last one: w = head index * row_blocks + rank, head index = b * heads_q + h. In this
// order (the static one) row blocks vary fastest, so the CTAs running at one time share a few
// heads' K and V in L2 (and the query heads of one GQA group are neighbours). Within a head the
// blocks run last to first: under a causal mask the last blocks see the most keys.
struct TileHead {
  int b, h, rank;
};

__device__ __forceinline__ TileHead tile_head(const FwdGrid& grid, int w) {
  int rank, h;
  const int head_index = grid.row_blocks.divmod(w, &rank);
  const int b = grid.heads_q.divmod(head_index, &h);
  return {b, h, rank};
}

// The work tile at position n of the dynamic order (tile_order.h; producer only: the consumers
// get the tile).
__device__ __forceinline__ int scheduled_tile(const FwdGrid& grid, int n) {
  return scheduled_tile(grid.row_blocks, grid.section_shift, n);
}

// kNarrowIndex: the visible keys in 32 bits, which the 24-register fp8 producers need (the
// consumers' allocation prefers the 64-bit form).
template <int kBlockM, int kBlockN, bool kNarrowIndex = false>
__device__ __forceinline__ WorkTile work_tile(const AttnProblem& p, const FwdGrid& grid, int w) {
  WorkTile t;
  const TileHead head = tile_head(grid, w);
  t.row0 = (grid.row_blocks.divisor - 1 - head.rank) * kBlockM;
  t.h = head.h;
  t.b = head.b;
  t.sq = int(p.lens.q_rows(t.b));  // (rows past seqlen_q have no tile)
  t.sk = int(p.lens.k(t.b));
  t.valid = t.row0 < t.sq;
  if constexpr (kNarrowIndex) {  // (the launch clamps the windows and keeps rows + keys below 2^31)
    const int begin = row_keys_32(p.mask, t.row0, t.sq, t.sk).begin;
    const int end = row_keys_32(p.mask, t.row0 + min(kBlockM, t.sq - t.row0) - 1, t.sq, t.sk).end;
    t.tile_begin = begin / kBlockN;
    t.tile_end = !t.valid || end <= begin ? t.tile_begin : (end + kBlockN - 1) / kBlockN;
  } else {
    const KeyRange keys = visible_keys(p.mask, t.row0, t.row0 + min(kBlockM, t.sq - t.row0), t.sq, t.sk);
    t.tile_begin = int(keys.begin / kBlockN);
    t.tile_end = keys.empty() ? t.tile_begin : int((keys.end + kBlockN - 1) / kBlockN);
  }
  return t;
}

}  // namespace flashattn::fa3
