// Pack-GQA for single-query problems (decoding): the G = heads_q / heads_k query heads that share
// a KV head become G query rows of one head, so a kernel reads each KV tile once per KV head
// instead of once per query head. Pure re-addressing of q, out and lse (their strides), exact
// whenever a row's logits do not depend on its position or head: one query row (a causal or
// right window then hides no key), no left window, no ALiBi (slopes are per head), no dropout
// (its mask is drawn per head).
#pragma once

#include "common/fast_divmod.h"
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

// Pack-GQA for any number of query tokens (speculative decoding: a few new tokens per sequence):
// a kernel's rows of KV head h_k are the G x seqlen_q pairs (token t, query head h_k * G + g) as
// row t * G + g, so each KV tile is read once per KV head. Token-major because a row's token, which
// the causal / window mask and the ALiBi distance take, is then non-decreasing in the row (a row
// range covers a token range, and masks stay ranges of keys), and because a token's G heads are
// adjacent in q and out. Unlike pack_gqa_rows this needs the kernel's help (the mask and ALiBi
// read the row's token and head, the addresses divide by G), so it is a kernel variant, not a
// re-addressing: the call must have dense or strided queries (no cu_seqlens, block table, batch
// index or row offset on q and out), no dropout (drawn per head and row), and fewer than 2^30 rows.
inline bool can_pack_gqa_queries(const AttnProblem& p) {
  return p.heads_k > 0 && p.heads_q >= p.heads_k && p.heads_q % p.heads_k == 0 && p.lens.cu_seqlens_q == nullptr &&
         p.q.cu_seqlens == nullptr && p.q.block_table == nullptr && p.q.batch_index == nullptr &&
         p.q.row_offset == nullptr && p.out.cu_seqlens == nullptr && p.out.block_table == nullptr &&
         p.out.batch_index == nullptr && p.out.row_offset == nullptr && p.lse.cu_seqlens == nullptr &&
         p.dropout_p == 0.f && p.lens.seqlen_q >= 0 && p.heads_q / p.heads_k * p.lens.seqlen_q < (int64_t(1) << 30);
}

inline int64_t packed_query_rows(const AttnProblem& p) { return p.heads_q / p.heads_k * p.lens.seqlen_q; }

// What a packing kernel needs besides the call: G (the query heads per KV head) as a divisor, and
// the rows per KV head (G * seqlen_q). group 1 with rows = seqlen_q packs nothing.
struct QueryRowPack {
  FastDivmod group;
  int rows = 0;
};

inline QueryRowPack query_row_pack(const AttnProblem& p) {
  QueryRowPack pack;
  pack.group = FastDivmod(int(p.heads_q / p.heads_k));
  pack.rows = int(packed_query_rows(p));
  return pack;
}

}  // namespace flashattn
