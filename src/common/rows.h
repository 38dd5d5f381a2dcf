// Addressing one head-row (a head_dim vector) of a (batch, seq, heads, dim) tensor, whatever its
// storage: dense with strides, varlen (rows packed, cu_seqlens give each sequence's first row),
// paged (pages of page_size rows found through a block table) and batch-indexed KV caches.
// Shared by every backend so that they address memory the same way.
//
// Index tensors on a GPU are not checked by the host (it cannot read them), so every entry read
// here is clamped into what the host knows is allocated: garbage gives wrong rows, never an
// access outside the tensor. (SeqLens clamps the lengths to match; valid entries are unchanged.)
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

// v clamped to [lo, hi] (hi wins when lo > hi).
FA_HD int64_t clamp_index(int64_t v, int64_t lo, int64_t hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}
// The same in 32 bits, for index entries against bounds that fit int32 (the validated shapes'
// dims and a cache's capacity do): one min and one max.
FA_HD int32_t clamp_entry(int32_t v, int32_t lo, int32_t hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}
// An index entry into n things (n fits int32): v when in [0, n), else 0, which exists whenever
// anything is read (the host leaves no rows to read where n is 0). One compare against n, which
// the kernels read from their parameters: no register held for a bound.
FA_HD int32_t entry_below(int32_t v, int64_t n) { return uint32_t(v) < uint32_t(n) ? v : 0; }

struct RowsView {
  void* data = nullptr;
  int64_t batch_stride = 0;  // dense: elements between sequences; paged: between pages
  int64_t row_stride = 0;
  int64_t head_stride = 0;
  const int32_t* cu_seqlens = nullptr;    // varlen: first row of sequence b is cu_seqlens[b]
  const int32_t* batch_index = nullptr;   // KV cache: sequence b lives in cache row batch_index[b]
  const int32_t* block_table = nullptr;   // paged: page p of sequence b is block_table[b * bt_stride + p]
  int64_t block_table_stride = 0;
  int64_t page_size = 0;
  const int32_t* row_offset = nullptr;    // left-padded cache: position row of sequence b is stored
                                          //   at row_offset[b] + row (before paging)
  // The allocation's bounds that the entries above are clamped to: extent = the tensor's first
  // dimension (varlen: rows; paged: pages; batch-indexed: cache sequences); positions = the
  // positions one sequence holds (row_offset's bound).
  int64_t extent = 0;
  int64_t positions = 0;

  // First row of varlen sequence b (its rows end within extent: SeqLens::q, SeqLens::k).
  FA_HD int64_t sequence_start(int64_t b) const { return clamp_entry(cu_seqlens[b], 0, int32_t(extent)); }
  // The cache sequence that holds sequence b.
  FA_HD int64_t cache_sequence(int64_t b) const { return entry_below(batch_index[b], extent); }
  // The page holding entry `index` of sequence b's block table.
  FA_HD int64_t page(int64_t b, int64_t index) const {
    return entry_below(block_table[b * block_table_stride + index], extent);
  }
  // The cache position of row 0 of sequence b (0 without left padding).
  FA_HD int64_t first_position(int64_t b) const {
    return row_offset != nullptr ? clamp_entry(row_offset[b], 0, int32_t(positions)) : 0;
  }

  // Offset in elements of (sequence b, position row, head h).
  FA_HD int64_t offset(int64_t b, int64_t row, int64_t h) const {
    if (row_offset != nullptr) row += first_position(b);
    if (block_table != nullptr)
      return page(b, row / page_size) * batch_stride + (row % page_size) * row_stride + h * head_stride;
    if (cu_seqlens != nullptr) return (sequence_start(b) + row) * row_stride + h * head_stride;
    const int64_t bb = batch_index != nullptr ? cache_sequence(b) : b;
    return bb * batch_stride + row * row_stride + h * head_stride;
  }
  template <typename T>
  FA_HD T* ptr(int64_t b, int64_t row, int64_t h) const {
    return static_cast<T*>(data) + offset(b, row, h);
  }
};

// Whether every row of a view of 2-byte elements starts 16-byte aligned (dense or varlen: the base
// and every stride): then kernels move its rows with 16-byte accesses.
inline bool rows_aligned_16(const RowsView& v) {
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && v.batch_stride % 8 == 0 && v.row_stride % 8 == 0 &&
         v.head_stride % 8 == 0;
}

// softmax_lse: (batch, heads, seqlen) dense or (heads, total) varlen, float32.
struct LseView {
  float* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 1;
  const int32_t* cu_seqlens = nullptr;
  int64_t total = 0;  // varlen: the rows (cu_seqlens entries are clamped to them, as in RowsView)

  FA_HD int64_t offset(int64_t b, int64_t row, int64_t h) const {
    if (cu_seqlens != nullptr) return h * head_stride + (clamp_entry(cu_seqlens[b], 0, int32_t(total)) + row) * row_stride;
    return b * batch_stride + h * head_stride + row * row_stride;
  }
  FA_HD bool defined() const { return data != nullptr; }
};

}  // namespace flashattn
