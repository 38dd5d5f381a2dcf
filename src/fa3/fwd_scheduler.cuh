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
  int work_tiles;      // row_blocks * heads_q * batch (fa3::check keeps it below 2^31)
};

struct WorkTile {
  int b, h;
  int row0;                  // first query row of the block
  int sq, sk;                // this sequence's query and key lengths
  int tile_begin, tile_end;  // kBlockN-key tiles with a visible key; empty when equal
  bool valid;                // false: the block starts past this (varlen) sequence's end
};

// Row blocks vary fastest, so the CTAs running at one time share a few heads' K and V in L2 (and
// the query heads of one GQA group are neighbours). Within a head the blocks run last to first: under
// a causal mask the last blocks see the most keys, and the longest tiles go first.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ WorkTile work_tile(const AttnProblem& p, const FwdGrid& grid, int w) {
  WorkTile t;
  const int head_index = w / grid.row_blocks;
  t.row0 = (grid.row_blocks - 1 - (w - head_index * grid.row_blocks)) * kBlockM;
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
