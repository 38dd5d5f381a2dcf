// Addressing one head-row (a head_dim vector) of a (batch, seq, heads, dim) tensor, whatever its
// storage: dense with strides, varlen (rows packed, cu_seqlens give each sequence's first row),
// paged (pages of page_size rows found through a block table) and batch-indexed KV caches.
// Shared by every backend so that they address memory the same way.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

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

  // Offset in elements of (sequence b, position row, head h).
  FA_HD int64_t offset(int64_t b, int64_t row, int64_t h) const {
    if (row_offset != nullptr) row += row_offset[b];
    if (block_table != nullptr) {
      const int64_t page = block_table[b * block_table_stride + row / page_size];
      return page * batch_stride + (row % page_size) * row_stride + h * head_stride;
    }
    if (cu_seqlens != nullptr) return (int64_t(cu_seqlens[b]) + row) * row_stride + h * head_stride;
    const int64_t bb = batch_index != nullptr ? int64_t(batch_index[b]) : b;
    return bb * batch_stride + row * row_stride + h * head_stride;
  }
  template <typename T>
  FA_HD T* ptr(int64_t b, int64_t row, int64_t h) const {
    return static_cast<T*>(data) + offset(b, row, h);
  }
};

// softmax_lse: (batch, heads, seqlen) dense or (heads, total) varlen, float32.
struct LseView {
  float* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 1;
  const int32_t* cu_seqlens = nullptr;

  FA_HD int64_t offset(int64_t b, int64_t row, int64_t h) const {
    if (cu_seqlens != nullptr) return h * head_stride + (int64_t(cu_seqlens[b]) + row) * row_stride;
    return b * batch_stride + h * head_stride + row * row_stride;
  }
  FA_HD bool defined() const { return data != nullptr; }
};

}  // namespace flashattn
