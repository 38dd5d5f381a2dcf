// Which keys a query row may attend to: sequence bounds, causal and sliding-window masks.
// One definition for every backend. Masks are aligned to the bottom-right corner of the
// seqlen_q x seqlen_k score matrix: the diagonal of row i is key i + seqlen_k - seqlen_q.
// Causal is the window (left = -1, right = 0); -1 means unbounded on that side.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/int_div.h"

namespace flashattn {

struct MaskParams {
  int window_left = -1;
  int window_right = -1;
  // Causal or a sliding window: rows see different key ranges (tiles differ in length).
  FA_HD bool limits_keys() const { return window_left >= 0 || window_right >= 0; }
};

FA_HD int64_t diagonal_key(int64_t row, int64_t seqlen_q, int64_t seqlen_k) {
  return row + seqlen_k - seqlen_q;
}

FA_HD bool key_visible(MaskParams m, int64_t row, int64_t key, int64_t seqlen_q, int64_t seqlen_k) {
  if (key < 0 || key >= seqlen_k) return false;
  const int64_t diag = diagonal_key(row, seqlen_q, seqlen_k);
  if (m.window_right >= 0 && key > diag + m.window_right) return false;
  if (m.window_left >= 0 && key < diag - m.window_left) return false;
  return true;
}

// Half-open range of keys visible to at least one row of [row_begin, row_end).
struct KeyRange {
  int64_t begin, end;
  FA_HD bool empty() const { return begin >= end; }
};

FA_HD KeyRange visible_keys(MaskParams m, int64_t row_begin, int64_t row_end, int64_t seqlen_q,
                            int64_t seqlen_k) {
  int64_t begin = 0, end = seqlen_k;
  if (row_begin >= row_end) return {0, 0};
  if (m.window_left >= 0) {
    const int64_t b = diagonal_key(row_begin, seqlen_q, seqlen_k) - m.window_left;
    begin = b > 0 ? b : 0;
  }
  if (m.window_right >= 0) {
    const int64_t e = diagonal_key(row_end - 1, seqlen_q, seqlen_k) + m.window_right + 1;
    end = e < seqlen_k ? e : seqlen_k;
  }
  if (end < begin) end = begin;
  return {begin, end};
}

// Half-open range of query rows that see at least one key of [key_begin, key_end)
// (the transpose of visible_keys, used by the backward pass over key blocks).
FA_HD KeyRange visible_rows(MaskParams m, int64_t key_begin, int64_t key_end, int64_t seqlen_q,
                            int64_t seqlen_k) {
  if (key_begin >= key_end) return {0, 0};
  int64_t begin = 0, end = seqlen_q;
  const int64_t shift = seqlen_k - seqlen_q;  // row i has diagonal key i + shift
  if (m.window_right >= 0) {
    // key <= i + shift + right  <=>  i >= key - shift - right
    const int64_t b = key_begin - shift - m.window_right;
    begin = b > 0 ? b : 0;
  }
  if (m.window_left >= 0) {
    // key >= i + shift - left  <=>  i <= key + left - shift
    const int64_t e = (key_end - 1) + m.window_left - shift + 1;
    end = e < seqlen_q ? e : seqlen_q;
  }
  if (end < begin) end = begin;
  return {begin, end};
}

// The same mask with windows wider than any sequence of the call narrowed to a width that is still
// wider (left: seqlen_k, right: seqlen_q; each at least the longest sequence of the call), so that
// kernels can form row +- window in 32 bits.
FA_HD MaskParams clamp_windows(MaskParams m, int64_t seqlen_q, int64_t seqlen_k) {
  if (m.window_left > seqlen_k) m.window_left = int(seqlen_k);
  if (m.window_right > seqlen_q) m.window_right = int(seqlen_q);
  return m;
}

// visible_keys of one row in 32 bits, for kernels short of registers. Needs windows from
// clamp_windows and row + seqlen_k + seqlen_q below 2^31: then nothing overflows. Empty: begin >= end.
struct RowKeys {
  int begin, end;
};

FA_HD RowKeys row_keys_32(MaskParams m, int row, int seqlen_q, int seqlen_k) {
  const int diag = row + (seqlen_k - seqlen_q);
  const int begin = m.window_left >= 0 && diag - m.window_left > 0 ? diag - m.window_left : 0;
  const int end = m.window_right >= 0 && diag + m.window_right + 1 < seqlen_k ? diag + m.window_right + 1 : seqlen_k;
  return {begin, end};
}

// The transpose of row_keys_32: the query rows [begin, end) that see `key` (empty when begin >=
// end; none for a key at or past seqlen_k), under the same conditions.
FA_HD RowKeys key_rows_32(MaskParams m, int key, int seqlen_q, int seqlen_k) {
  if (key >= seqlen_k) return {0, 0};
  const int shifted = key - (seqlen_k - seqlen_q);  // the row whose diagonal is `key`
  const int begin = m.window_right >= 0 && shifted - m.window_right > 0 ? shifted - m.window_right : 0;
  const int end = m.window_left >= 0 && shifted + m.window_left + 1 < seqlen_q ? shifted + m.window_left + 1 : seqlen_q;
  return {begin, end};
}

// tile_fully_visible (below) in 32 bits, under row_keys_32's conditions, for kernels short of
// registers (64-bit operands take register pairs).
FA_HD bool tile_fully_visible_32(MaskParams m, int row_begin, int row_end, int key_begin, int key_end, int seqlen_q, int seqlen_k) {
  if (key_begin < 0 || key_end > seqlen_k || row_begin >= row_end) return false;
  const int shift = seqlen_k - seqlen_q;  // row i has diagonal key i + shift
  if (m.window_right >= 0 && key_end - 1 > row_begin + shift + m.window_right) return false;
  if (m.window_left >= 0 && key_begin < row_end - 1 + shift - m.window_left) return false;
  return true;
}

// The key tiles [begin, end) of block_n keys (tile t: keys t block_n .. + block_n - 1) that
// tile_fully_visible_32 finds fully visible to the rows [row_begin, row_end), under its conditions:
// one interval (a row's limits move right with the row), so a kernel finds it once per row block
// and tests a tile with two compares. Empty: begin >= end.
struct TileSpan {
  int begin, end;
  FA_HD bool contains(int tile) const { return tile >= begin && tile < end; }
};

FA_HD TileSpan fully_visible_tiles_32(MaskParams m, int row_begin, int row_end, int block_n, int seqlen_q, int seqlen_k) {
  if (row_begin >= row_end) return {0, 0};
  const int shift = seqlen_k - seqlen_q;
  int begin = 0, end = seqlen_k / block_n;  // the tile's last key before seqlen_k
  // Right limit of the top row: (t + 1) block_n - 1 <= row_begin + shift + right.
  if (m.window_right >= 0) {
    const int e = floor_div(row_begin + shift + m.window_right + 1, block_n);
    end = e < end ? e : end;
  }
  // Left limit of the bottom row: t block_n >= row_end - 1 + shift - left (a ceiling division,
  // written as floor_div: ceil_div compiles to other code in the measured kernels).
  if (m.window_left >= 0) {
    const int b = -floor_div(-(row_end - 1 + shift - m.window_left), block_n);
    begin = b > 0 ? b : 0;
  }
  return {begin, end};
}

// True when every (row, key) of the tile is visible, so the tile needs no per-element mask.
FA_HD bool tile_fully_visible(MaskParams m, int64_t row_begin, int64_t row_end, int64_t key_begin,
                              int64_t key_end, int64_t seqlen_q, int64_t seqlen_k) {
  if (key_begin < 0 || key_end > seqlen_k || row_begin >= row_end) return false;
  // The most restrictive corners: the top row's right limit and the bottom row's left limit.
  if (m.window_right >= 0 &&
      key_end - 1 > diagonal_key(row_begin, seqlen_q, seqlen_k) + m.window_right)
    return false;
  if (m.window_left >= 0 && key_begin < diagonal_key(row_end - 1, seqlen_q, seqlen_k) - m.window_left)
    return false;
  return true;
}

}  // namespace flashattn
