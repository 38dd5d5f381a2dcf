// The layout of the FA2 backward's fp32 dQ workspace (dq_accum), host and device so that the CPU
// tests check it: 16 x 16 tiles, each in the order of the m16n8k16 accumulators that add to it.
#pragma once

#include <cstdint>

#include "common/dq_quad.h"
#include "common/host_device.h"

namespace flashattn::fa2 {

// Element (r, c) of a 16 x 16 dQ tile, r and c < 16, in the staging tile and in dq_accum: its two
// n8 halves one after the other, each lane after lane. Lane 4g + q holds rows g and g + 8 at
// columns 2q and 2q + 1 of a half: those four values are one float4, and a warp's float4s of a
// half are 512 contiguous bytes, so the accumulators are added straight from registers, or staged
// by conflict-free vector stores. Columns 2k and 2k + 1 are adjacent (the conversion reads pairs).
FA_HD int dq_tile_offset(int r, int c) { return (c / 8) * 128 + ((r % 8) * 4 + (c % 8) / 2) * 4 + (r / 8) * 2 + c % 2; }

// The row within its tile of the element at `offset` of a tile (the inverse's row part).
FA_HD int dq_tile_row(int offset) { return (offset % 128) / 16 + 8 * ((offset / 2) % 2); }

// The 16 x 16 tile of dq_accum holding workspace row `ws_row` (its sequence's base + row) and
// column `col`.
FA_HD int64_t dq_tile_index(int64_t ws_row, int col, int dq_cols) { return ((ws_row / 16) * (dq_cols / 16) + col / 16) * 256; }

// Float4 f of a 64-row slab (four 16-row groups of dq_cols / 16 tiles each) holds (r, c),
// (r, c + 1), (r + 8, c), (r + 8, c + 1) for this (r, c): the conversion reads slabs in float4 order.
FA_HD DqQuad dq_slab_quad(int f, int dq_cols) {
  const int group = f / (4 * dq_cols), in_group = f - group * 4 * dq_cols;
  const int tile = in_group / 64, q = in_group % 64;
  return {16 * group + (q % 32) / 4, 16 * tile + 8 * (q / 32) + 2 * (q % 4)};
}

}  // namespace flashattn::fa2
