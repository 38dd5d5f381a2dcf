// The layout of the FA3 backward's fp32 dQ workspace (dq_accum), host and device so that the CPU
// tests check it. Per (sequence, query head): rows_padded / 64 slabs of 64 rows; a slab is
// dq_cols / chunk_cols chunks of 64 rows x chunk_cols columns, each in the order of the wgmma
// accumulators of the consumer warpgroup that computes it. A warpgroup's chunk is then staged by
// conflict-free 16-byte stores and added by one bulk reduction of contiguous bytes.
#pragma once

#include <cstdint>

#include "common/dq_quad.h"
#include "common/host_device.h"

namespace flashattn::fa3 {

// Element (r, c) of a chunk, r < 64: accumulator j = 4 (c / 8) + 2 (r % 16 / 8) + c % 2 of thread
// t = 32 (r / 16) + 4 (r % 8) + (c % 8) / 2 (the m64nN layout), at float (128 (j / 4) + t) * 4 +
// j % 4: thread t's accumulators 4k .. 4k + 3 are one float4, a warpgroup's float4s of one k are
// 2048 contiguous bytes. Columns 2k and 2k + 1 are adjacent (the conversion reads pairs).
FA_HD int dq_chunk_element(int r, int c) {
  const int t = 32 * (r / 16) + 4 * (r % 8) + (c % 8) / 2;
  return (128 * (c / 8) + t) * 4 + 2 * ((r % 16) / 8) + c % 2;
}

// Float4 f of a chunk (floats 4f .. 4f + 3) holds (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1)
// for this (r, c): the conversion reads the chunk in float4 order.
FA_HD DqQuad dq_chunk_quad(int f) {
  const int t = f % 128;
  return {16 * (t / 32) + (t % 32) / 4, 8 * (f / 128) + 2 * (t % 4)};
}

// Float4 f of a 64-row slab (its chunks of chunk_cols columns side by side): dq_chunk_quad's
// (r, c) in the slab's columns.
FA_HD DqQuad dq_slab_quad(int f, int chunk_cols) {
  const int chunk = f / (16 * chunk_cols);
  const DqQuad q = dq_chunk_quad(f - chunk * 16 * chunk_cols);
  return {q.row, chunk * chunk_cols + q.col};
}

// First float of the chunk holding workspace row `ws_row` (the (sequence, head)'s base row +
// row) and column `col`.
FA_HD int64_t dq_chunk_offset(int64_t ws_row, int col, int chunk_cols, int dq_cols) {
  return ((ws_row / 64) * (dq_cols / chunk_cols) + col / chunk_cols) * int64_t(64 * chunk_cols);
}

}  // namespace flashattn::fa3
