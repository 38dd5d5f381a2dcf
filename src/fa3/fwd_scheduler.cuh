// Work of the FA3 forward: each CTA walks the work tiles blockIdx.x, blockIdx.x + gridDim.x, ...;
// a work tile is one kBlockM-row block of one (sequence, query head). Persistent launches (one CTA
// per SM) overlap the next tile's Q and K loads with the last P V and the epilogue of the current
// one; with a CTA per tile (gridDim.x = work_tiles) the loop runs once.
#pragma once

#include <cstdint>

#include "common/mask.h"
#include "common/problem.h"

namespace flashattn::fa3 {

struct FwdGrid {
  int row_blocks;      // kBlockM-row blocks of the longest query sequence
  int work_tiles;      // row_blocks * heads_q * batch (fa3::check keeps it below 2^30: w + gridDim.x fits)
  bool length_major;   // the order for persistent launches of unequal tiles (see work_tile)
};

struct WorkTile {
  int b, h;
  int row0;                  // first query row of the block
  int sq, sk;                // this sequence's query and key lengths
  int tile_begin, tile_end;  // kBlockN-key tiles with a visible key; empty when equal
  bool valid;                // false: the block starts past this (varlen) sequence's end
};

// Default order: row blocks vary fastest, so the CTAs running at one time share a few heads' K and
// V in L2 (and the query heads of one GQA group are neighbours). Within a head the blocks run last
// to first: under a causal mask the last blocks see the most keys, and the longest tiles go first.
// Length-major order (persistent causal): all (sequence, head) pairs' last row blocks first, then
// the next-to-last, ..., and every other wave of gridDim.x tiles in reverse, so that a CTA
// which took one of the longest tiles of a wave takes one of the shortest of the next and the
// CTAs' totals balance (a plain stride gave some CTAs three times the work of others).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ WorkTile work_tile(const AttnProblem& p, const FwdGrid& grid, int w) {
  WorkTile t;
  int head_index, rank;  // rank: row blocks from the last one
  if (grid.length_major) {
    const int ctas = int(gridDim.x), cta = int(blockIdx.x);
    const int wave = (w - cta) / ctas;
    const int in_wave = min(ctas, grid.work_tiles - wave * ctas);  // fewer in the last, partial wave
    const int q = (wave & 1) ? wave * ctas + (in_wave - 1 - cta) : w;
    const int pairs = grid.work_tiles / grid.row_blocks;
    rank = q / pairs;
    head_index = q - rank * pairs;
  } else {
    head_index = w / grid.row_blocks;
    rank = w - head_index * grid.row_blocks;
  }
  t.row0 = (grid.row_blocks - 1 - rank) * kBlockM;
  t.h = head_index % int(p.heads_q);
  t.b = head_index / int(p.heads_q);
  t.sq = int(p.lens.q(t.b));
  t.sk = int(p.lens.k(t.b));
  t.valid = t.row0 < t.sq;
  const KeyRange keys = visible_keys(p.mask, t.row0, t.row0 + min(kBlockM, t.sq - t.row0), t.sq, t.sk);
  t.tile_begin = int(keys.begin / kBlockN);
  t.tile_end = keys.empty() ? t.tile_begin : int((keys.end + kBlockN - 1) / kBlockN);
  return t;
}

}  // namespace flashattn::fa3
