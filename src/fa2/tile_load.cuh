// The FA2 kernels' tile loader: rows of a (batch, seqlen, heads, dim) tensor into padded shared
// memory with 16-byte cp.async copies, for the forward and the backward alike.
#pragma once

#include <cstdint>

#include "arch/sm80/cp_async.cuh"
#include "arch/sm80/ldmatrix.cuh"
#include "common/fast_divmod.h"
#include "common/rows.h"

namespace flashattn::fa2 {

// The L2 prefetch size of a kernel's tile copies (sm80::cp_async_16): Config::kL2Prefetch where
// the config names one, else none.
template <typename Config>
constexpr int l2_prefetch_bytes() {
  if constexpr (requires { Config::kL2Prefetch; }) return Config::kL2Prefetch;
  else return 0;
}

// Where a loader puts a row's 16-byte chunks in shared memory: rows padded by 16 bytes
// (Config::kRowStride), or, kSwizzled, unpadded rows (Config::kKVRowStride) whose chunk c of row r
// lies at chunk c ^ (r % 8) of its 128-byte group (fwd_kernel.cuh, FwdConfig::kSwizzleKV).
template <typename Config, bool kSwizzled>
struct SmemRows {
  static constexpr int kStride = [] {
    if constexpr (kSwizzled) return Config::kKVRowStride;
    else return Config::kRowStride;
  }();
  // Element offset of (row, col), col a multiple of 8.
  static __device__ __forceinline__ int offset(int row, int col) {
    if constexpr (kSwizzled) return row * kStride + (((col / 8) ^ (row & 7)) * 8);
    else return row * kStride + col;
  }
};

// How the CTA's threads cover a tile of kRows rows of 16-byte chunks: each thread copies one column
// of chunks every kRowStep rows. When the chunks of a row do not divide the threads (head dims 96,
// 160, 192, 224), the threads past the last whole row group idle and the last step covers a
// partial group.
template <typename Config, int kRows>
struct TileThreads {
  static constexpr int kChunksPerRow = Config::kHeadDim / 8;
  static constexpr int kRowStep = Config::kThreads / kChunksPerRow;
  static constexpr bool kExact = Config::kThreads % kChunksPerRow == 0 && kRows % kRowStep == 0;
  static constexpr int kSteps = (kRows + kRowStep - 1) / kRowStep;
  static_assert(kRowStep > 0, "at least one row per step");
};

// Copies rows [row0, row0 + kRows) of (b, head) into shared memory (row stride kRowStride);
// rows past `rows_valid` and columns past `dim` are zero-filled (TileThreads: which thread copies
// what), so dense and varlen layouts need one address computation per thread and tile; paged
// caches look each row's page up (load_paged_tile_async).
template <typename Config, int kRows, bool kSwizzled = false>
__device__ __forceinline__ void load_paged_tile_async(const RowsView& view, int64_t b, int64_t head, int64_t row0,
                                                      int64_t rows_valid, int dim, typename Config::Element* smem);

template <typename Config, int kRows, bool kSwizzled = false>
__device__ __forceinline__ void load_tile_async(const RowsView& view, int64_t b, int64_t head, int64_t row0,
                                                int64_t rows_valid, int dim, typename Config::Element* smem) {
  using Element = typename Config::Element;
  using Threads = TileThreads<Config, kRows>;
  using Rows = SmemRows<Config, kSwizzled>;
  constexpr int kChunksPerRow = Threads::kChunksPerRow, kRowStep = Threads::kRowStep, kSteps = Threads::kSteps;
  constexpr bool kExact = Threads::kExact;
  static_assert(!kSwizzled || kRowStep % 8 == 0, "a thread's rows share their swizzle");
  const Element* base = static_cast<const Element*>(view.data);
  const int first_row = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
  if (!kExact && first_row >= kRowStep) return;  // a thread past the last whole row group
  const bool col_valid = col < dim;
  const uint32_t dst = sm80::smem_address(smem + Rows::offset(first_row, col));
  // Whether step i of this thread lands inside the tile (always, when the rows divide evenly).
  auto in_tile = [&](int i) { return kExact || first_row + i * kRowStep < kRows; };
  if (view.block_table == nullptr) {
    const Element* src = base + view.offset(b, row0 + first_row, head) + col;
    const int64_t step = kRowStep * view.row_stride;
#pragma unroll 1  // a rolled loop keeps addresses out of the registers the MMAs need
    for (int i = 0; i < kSteps; ++i) {
      if (!in_tile(i)) break;
      const bool valid = col_valid && first_row + i * kRowStep < rows_valid;
      sm80::cp_async_16<l2_prefetch_bytes<Config>()>(dst + i * kRowStep * Rows::kStride * int(sizeof(Element)), valid ? src + i * step : base,
                        valid);
    }
  } else {
    load_paged_tile_async<Config, kRows, kSwizzled>(view, b, head, row0, rows_valid, dim, smem);
  }
}

// The Q tile of a kernel that packs query heads into rows (common/pack_gqa.h): rows [row0, row0 +
// kRows), row r being token r / G of query head head0 + r % G of sequence b, from a strided view
// (can_pack_gqa_queries: no varlen, paged or indexed queries). Rows from rows_valid on and columns
// past `dim` are zero-filled. Once per CTA, so each row's division stays in the loop.
template <typename Config, int kRows>
__device__ __forceinline__ void load_packed_query_tile_async(const RowsView& view, int64_t b, int64_t head0, int row0,
                                                             int rows_valid, int dim, const FastDivmod& group,
                                                             typename Config::Element* smem) {
  using Element = typename Config::Element;
  using Threads = TileThreads<Config, kRows>;
  constexpr int kChunksPerRow = Threads::kChunksPerRow, kRowStep = Threads::kRowStep, kSteps = Threads::kSteps;
  const Element* base = static_cast<const Element*>(view.data);
  const int first_row = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
  if (!Threads::kExact && first_row >= kRowStep) return;  // a thread past the last whole row group
  const Element* rows = base + view.offset(b, 0, head0) + col;
  const uint32_t dst = sm80::smem_address(smem + first_row * Config::kRowStride + col);
  constexpr uint32_t kDstStep = kRowStep * Config::kRowStride * sizeof(Element);
#pragma unroll 1  // a rolled loop keeps addresses out of the registers the MMAs need
  for (int i = 0; i < kSteps; ++i) {
    const int r = first_row + i * kRowStep;
    if (!Threads::kExact && r >= kRows) break;
    int g;
    const int token = group.divmod(row0 + r, &g);
    const bool valid = col < dim && r < rows_valid;
    sm80::cp_async_16<l2_prefetch_bytes<Config>()>(dst + i * kDstStep, valid ? rows + token * view.row_stride + g * view.head_stride : base, valid);
  }
}

// The paged form of load_tile_async (view.block_table set): the block-table reads of all of a
// thread's rows are issued together, before any copy needs one, so a tile waits on the table
// (small, in L2) about once instead of once per row; positions and pages in 32 bits (a cache's
// capacity fits int32, validated) spare the 64-bit divisions. The view's fields stay in the kernel
// parameter space: no registers held across the key loop. Pages and the left padding are clamped
// into the cache (RowsView::page, RowsView::first_position).
template <typename Config, int kRows, bool kSwizzled>
__device__ __forceinline__ void load_paged_tile_async(const RowsView& view, int64_t b, int64_t head, int64_t row0,
                                                      int64_t rows_valid, int dim, typename Config::Element* smem) {
  using Element = typename Config::Element;
  using Threads = TileThreads<Config, kRows>;
  using Rows = SmemRows<Config, kSwizzled>;
  constexpr int kChunksPerRow = Threads::kChunksPerRow, kRowStep = Threads::kRowStep, kSteps = Threads::kSteps;
  constexpr bool kExact = Threads::kExact;
  const Element* base = static_cast<const Element*>(view.data);
  const int first_row = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
  if (!kExact && first_row >= kRowStep) return;  // a thread past the last whole row group
  const int page_size = int(view.page_size);
  const int32_t* pages = view.block_table + b * view.block_table_stride;
  const int first = int(row0) + first_row + int(view.first_position(b));
  const int rows_left = int(rows_valid < kRows ? rows_valid : kRows) - first_row;  // rows i * kRowStep < rows_left
  int page[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i)
    page[i] = i * kRowStep < rows_left ? entry_below(pages[(first + i * kRowStep) / page_size], view.extent) : 0;
  const Element* head_rows = base + head * view.head_stride + col;
  const uint32_t dst = sm80::smem_address(smem + Rows::offset(first_row, col));
  constexpr uint32_t kDstStep = kRowStep * Rows::kStride * sizeof(Element);
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    if (!kExact && first_row + i * kRowStep >= kRows) break;
    const int position = first + i * kRowStep;
    const bool valid = col < dim && i * kRowStep < rows_left;
    const Element* src = head_rows + int64_t(page[i]) * view.batch_stride + int64_t(position % page_size) * view.row_stride;
    sm80::cp_async_16<l2_prefetch_bytes<Config>()>(dst + i * kDstStep, valid ? src : base, valid);
  }
}

// Where a row of a paged cache lies: its page and its row within the page, as a kernel stages
// them in shared memory for a whole tile (one division per row, not per 16-byte copy).
struct PagedRow {
  int32_t page, row;
};

// The copies of one paged K tile and its V tile whose rows a kernel staged in shared memory
// beforehand (tile_rows[r]: where row r lies): the table reads and divisions then happen before the
// kernel waits on the tile in flight, overlapping that wait, and K and V share them; each copy
// costs a shared load shared by K and V and two multiply-adds. Unrolled by four, so that a
// thread's copies issue back to back without holding every address at once (the MMAs' registers
// are live here). Rows from rows_valid on and columns past dim_k / dim_v are zero-filled.
template <typename Config, int kRows, bool kSwizzled = false>
__device__ __forceinline__ void copy_staged_paged_kv_async(const RowsView& k, const RowsView& v, int64_t head, const PagedRow* tile_rows,
                                                           int rows_valid, int dim_k, int dim_v, typename Config::Element* k_smem,
                                                           typename Config::Element* v_smem) {
  using Element = typename Config::Element;
  using Threads = TileThreads<Config, kRows>;
  using Rows = SmemRows<Config, kSwizzled>;
  constexpr int kRowStep = Threads::kRowStep;
  static_assert(!kSwizzled || kRowStep % 8 == 0, "a thread's rows share their swizzle");
  const int first_row = threadIdx.x / Threads::kChunksPerRow, col = (threadIdx.x % Threads::kChunksPerRow) * 8;
  if (!Threads::kExact && first_row >= kRowStep) return;  // a thread past the last whole row group
  const Element* k_base = static_cast<const Element*>(k.data);
  const Element* v_base = static_cast<const Element*>(v.data);
  const Element* k_rows = k_base + head * k.head_stride + col;
  const Element* v_rows = v_base + head * v.head_stride + col;
  const uint32_t k_dst = sm80::smem_address(k_smem + Rows::offset(first_row, col));
  const uint32_t v_dst = sm80::smem_address(v_smem + Rows::offset(first_row, col));
  constexpr uint32_t kDstStep = kRowStep * Rows::kStride * sizeof(Element);
#pragma unroll 4
  for (int i = 0; i < Threads::kSteps; ++i) {
    const int r = first_row + i * kRowStep;
    if (!Threads::kExact && r >= kRows) break;
    const PagedRow at = tile_rows[r];
    const bool row_valid = r < rows_valid;
    const Element* k_src = k_rows + int64_t(at.page) * k.batch_stride + int64_t(at.row) * k.row_stride;
    const Element* v_src = v_rows + int64_t(at.page) * v.batch_stride + int64_t(at.row) * v.row_stride;
    sm80::cp_async_16<l2_prefetch_bytes<Config>()>(k_dst + i * kDstStep, row_valid && col < dim_k ? k_src : k_base, row_valid && col < dim_k);
    sm80::cp_async_16<l2_prefetch_bytes<Config>()>(v_dst + i * kDstStep, row_valid && col < dim_v ? v_src : v_base, row_valid && col < dim_v);
  }
}

// The tiles of one (sequence, head) whose rows are equally spaced in memory: dense, varlen and
// batch-indexed layouts, not paged caches. The address of row 0 is derived once per CTA (it is
// the same for every thread, so it needs no per-thread registers in the key loop); a tile then
// costs each thread one multiply-add and each 16-byte copy an add, where load_tile_async re-derives
// every row's address per tile (a varlen offset load, 64-bit multiplies, the layout branches): in
// the forward's key loop that was about as many instructions as the softmax.
template <typename Config, int kRows, bool kSwizzled = false>
struct StridedTileLoader {
  using Element = typename Config::Element;
  using Threads = TileThreads<Config, kRows>;
  using Rows = SmemRows<Config, kSwizzled>;
  static constexpr int kChunksPerRow = Threads::kChunksPerRow, kRowStep = Threads::kRowStep, kSteps = Threads::kSteps;
  static constexpr bool kExact = Threads::kExact;

  const Element* base;  // the tensor's start: the (unread) source of zero-filled copies
  const Element* rows;  // row 0, column 0 of (b, head)
  int64_t row_stride;   // elements
  int64_t head_stride;  // elements (for load_head)
  int dim;              // columns past dim are zero-filled

  __device__ __forceinline__ StridedTileLoader(const RowsView& view, int64_t b, int64_t head, int dim_)
      : base(static_cast<const Element*>(view.data)),
        // Paged views are not strided (their callers take load_tile_async); keep rows harmless.
        rows(view.block_table != nullptr ? base : base + view.offset(b, 0, head)),
        row_stride(view.row_stride),
        head_stride(view.head_stride),
        dim(dim_) {}

  // Rows [row0, row0 + kRows) into smem (row stride Config::kRowStride); rows from rows_valid on
  // and columns past dim are zero-filled.
  __device__ __forceinline__ void load(int row0, int rows_valid, Element* smem) const {
    load_rows(rows, row0, rows_valid, smem);
  }

  // The same for head `head + head_rel` of the sequence (the backward walks the query heads of a
  // GQA group): heads are equally spaced in every strided layout.
  __device__ __forceinline__ void load_head(int head_rel, int row0, int rows_valid, Element* smem) const {
    load_rows(rows + int64_t(head_rel) * head_stride, row0, rows_valid, smem);
  }

 private:
  __device__ __forceinline__ void load_rows(const Element* head_rows, int row0, int rows_valid, Element* smem) const {
    const int first_row = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
    if (!kExact && first_row >= kRowStep) return;  // a thread past the last whole row group
    static_assert(!kSwizzled || kRowStep % 8 == 0, "a thread's rows share their swizzle");
    const uint32_t dst = sm80::smem_address(smem + Rows::offset(first_row, col));
    constexpr uint32_t kDstStep = kRowStep * Rows::kStride * sizeof(Element);
    const Element* src = head_rows + int64_t(row0 + first_row) * row_stride + col;
    const int64_t step = kRowStep * row_stride;
    auto in_tile = [&](int i) { return kExact || first_row + i * kRowStep < kRows; };
    if (dim == Config::kHeadDim && rows_valid >= kRows) {  // every tile but a ragged last one
#pragma unroll
      for (int i = 0; i < kSteps; ++i)
        if (in_tile(i)) sm80::cp_async_16<l2_prefetch_bytes<Config>()>(dst + i * kDstStep, src + i * step, true);
    } else {
#pragma unroll
      for (int i = 0; i < kSteps; ++i) {
        if (!in_tile(i)) break;
        const bool valid = col < dim && first_row + i * kRowStep < rows_valid;
        sm80::cp_async_16<l2_prefetch_bytes<Config>()>(dst + i * kDstStep, valid ? src + i * step : base, valid);
      }
    }
  }
};

}  // namespace flashattn::fa2
