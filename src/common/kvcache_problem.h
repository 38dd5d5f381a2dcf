// A validated fwd_kvcache call: the attention over the cache, plus what happens before it
// (rotary on q and k_new, appending k_new/v_new into the cache at cache_seqlens).
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace flashattn {

struct RotaryParams {
  const void* cos = nullptr;  // (seqlen_ro, rotary_dim / 2), dtype of q
  const void* sin = nullptr;
  int64_t row_stride = 0;     // elements between positions in cos and sin
  int64_t rotary_dim = 0;     // 0 = no rotary
  int64_t seqlen_ro = 0;
  bool interleaved = false;
};

struct KvCacheProblem {
  AttnProblem attn;         // k, v = the cache; lens.cache_seqlens/seqlen_k_added give its length
  RowsView k_new, v_new;    // data == nullptr: nothing to append
  int64_t seqlen_new = 0;
  RotaryParams rotary;
  // Rotary positions of q: cache_seqlens[b] + i when causal or local, else cache_seqlens[b] for
  // every row (all new queries sit at the first new position), as in flash_attn.
  bool rotary_q_per_row = false;

  // Cache position of sequence b's first appended key: its rotary position, and q's (clamped
  // like the cache's lengths: see SeqLens::cache_length).
  FA_HD int64_t first_new_position(int64_t b) const { return attn.lens.cache_length(b); }
  // Whether appended key t of sequence b has a slot: always for valid contents; garbage
  // cache_seqlens on a GPU, which the host cannot check, may leave none.
  FA_HD bool new_key_fits(int64_t b, int64_t t) const { return first_new_position(b) + t < attn.lens.seqlen_k; }
  // Row of appended key t in the views k and v, which start at the sequence's first key (after
  // any left padding).
  FA_HD int64_t new_key_row(int64_t b, int64_t t) const {
    return first_new_position(b) + t - attn.lens.k_first_position(b);
  }
};

// Split-KV partial results merged into the final output. Element (split s, sequence b, row i,
// head h) lives at s * split + b * batch + i * row + h * head in each array (varlen: batch = 1).
struct CombineStrides {
  int64_t split = 0, batch = 0, row = 0, head = 0;
  FA_HD int64_t offset(int64_t s, int64_t b, int64_t i, int64_t h) const {
    return s * split + b * batch + i * row + h * head;
  }
};

struct CombineProblem {
  int64_t splits = 0, batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  const float* out_partial = nullptr;  // float32, last dim contiguous
  CombineStrides out_partial_strides;
  const float* lse_partial = nullptr;
  CombineStrides lse_partial_strides;
  void* out = nullptr;  // f32, f16 or bf16, last dim contiguous (split stride unused)
  DType out_dtype = DType::F32;
  CombineStrides out_strides;
  float* lse = nullptr;  // optional
  CombineStrides lse_strides;
};

}  // namespace flashattn
