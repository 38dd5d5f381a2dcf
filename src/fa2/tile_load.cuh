// The FA2 kernels' tile loader: rows of a (batch, seqlen, heads, dim) tensor into padded shared
// memory with 16-byte cp.async copies, for the forward and the backward alike.
#pragma once

#include <cstdint>

#include "arch/sm80/cp_async.cuh"
#include "arch/sm80/ldmatrix.cuh"
#include "common/rows.h"

namespace flashattn::fa2 {

// Copies rows [row0, row0 + kRows) of (b, head) into shared memory (row stride kRowStride);
// rows past `rows_valid` and columns past `dim` are zero-filled. Each thread copies one column of
// 16-byte chunks every kRowStep rows, so dense and varlen layouts need one address computation
// per thread and tile; paged caches look each row's page up. When the chunks of a row do not
// divide the threads (head dims 96, 160, 192, 224), the threads past the last whole row group
// idle and the last step covers a partial group.
template <typename Config, int kRows>
__device__ __forceinline__ void load_tile_async(const RowsView& view, int64_t b, int64_t head, int64_t row0,
                                                int64_t rows_valid, int dim, typename Config::Element* smem) {
  using Element = typename Config::Element;
  constexpr int kChunksPerRow = Config::kHeadDim / 8;
  constexpr int kRowStep = Config::kThreads / kChunksPerRow;
  constexpr bool kExact = Config::kThreads % kChunksPerRow == 0 && kRows % kRowStep == 0;
  constexpr int kSteps = (kRows + kRowStep - 1) / kRowStep;
  static_assert(kRowStep > 0, "at least one row per step");
  const Element* base = static_cast<const Element*>(view.data);
  const int first_row = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
  if (!kExact && first_row >= kRowStep) return;  // a thread past the last whole row group
  const bool col_valid = col < dim;
  const uint32_t dst = sm80::smem_address(smem + first_row * Config::kRowStride + col);
  // Whether step i of this thread lands inside the tile (always, when the rows divide evenly).
  auto in_tile = [&](int i) { return kExact || first_row + i * kRowStep < kRows; };
  if (view.block_table == nullptr) {
    const Element* src = base + view.offset(b, row0 + first_row, head) + col;
    const int64_t step = kRowStep * view.row_stride;
#pragma unroll 1  // a rolled loop keeps addresses out of the registers the MMAs need
    for (int i = 0; i < kSteps; ++i) {
      if (!in_tile(i)) break;
      const bool valid = col_valid && first_row + i * kRowStep < rows_valid;
      sm80::cp_async_16(dst + i * kRowStep * Config::kRowStride * int(sizeof(Element)), valid ? src + i * step : base,
                        valid);
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < kSteps; ++i) {
      if (!in_tile(i)) break;
      const int r = first_row + i * kRowStep;
      const bool valid = col_valid && r < rows_valid;
      sm80::cp_async_16(dst + i * kRowStep * Config::kRowStride * int(sizeof(Element)),
                        valid ? base + view.offset(b, row0 + r, head) + col : base, valid);
    }
  }
}

}  // namespace flashattn::fa2
