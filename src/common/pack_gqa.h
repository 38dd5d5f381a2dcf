// Pack-GQA for single-query problems (decoding): the G = heads_q / heads_k query heads that share
// a KV head become G query rows of one head, so a kernel reads each KV tile once per KV head
// instead of once per query head. Pure re-addressing of q, out and lse (their strides), exact
// whenever a row's logits do not depend on its position or head: one query row (a causal or
// right window then hides no key), no left window, no ALiBi (slopes are per head), no dropout
// (its mask is drawn per head).
#pragma once

#include "common/problem.h"

namespace flashattn {

inline bool can_pack_gqa_rows(const AttnProblem& p) {
  return p.heads_q > p.heads_k && p.lens.seqlen_q == 1 && p.lens.cu_seqlens_q == nullptr &&
         p.q.cu_seqlens == nullptr && p.q.block_table == nullptr && p.q.batch_index == nullptr &&
         p.q.row_offset == nullptr && p.out.cu_seqlens == nullptr && p.lse.cu_seqlens == nullptr &&
         p.alibi_slopes == nullptr && p.dropout_p == 0.f && p.mask.window_left < 0;
}

// Query head h_k * G + g of sequence b is row g of head h_k in the result.
inline AttnProblem pack_gqa_rows(const AttnProblem& p) {
  const int64_t group = p.heads_q / p.heads_k;
  AttnProblem packed = p;
  for (RowsView* rows : {&packed.q, &packed.out}) {
    rows->row_stride = rows->head_stride;
    rows->head_stride *= group;
  }
  packed.lse.row_stride = p.lse.head_stride;
  packed.lse.head_stride = p.lse.head_stride * group;
  packed.heads_q = p.heads_k;
  packed.lens.seqlen_q = group;
  packed.lens.total_q = p.batch * group;
  packed.mask = MaskParams{};  // at most a right window, which hides nothing from the one query row
  return packed;
}

}  // namespace flashattn
