// Split-KV: each split attends to a share of the key tiles and leaves a normalised partial output
// and its LSE in float32 workspaces; a combine step merges them exactly. The workspace layout and
// the combine description are shared by every backend.
//   out_partial (splits, packed rows, heads_q, head_dim_v), lse_partial (splits, packed rows, heads_q)
// where the packed row of (b, i) is cu_seqlens_q[b] + i (varlen) or b * seqlen_q + i.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/kvcache_problem.h"
#include "common/problem.h"

namespace flashattn {

FA_HD int64_t packed_row_base(const AttnProblem& p, int64_t b) {
  return p.lens.cu_seqlens_q != nullptr ? p.lens.q_start(b) : b * p.lens.seqlen_q;
}

// Keys [begin, end) of split `split` for a sequence of seqlen_k keys cut into tiles of tile_keys.
FA_HD KeyRange split_key_range(int64_t seqlen_k, int64_t tile_keys, int split, int splits) {
  const int64_t tiles = (seqlen_k + tile_keys - 1) / tile_keys;
  const int64_t per_split = (tiles + splits - 1) / splits;
  const int64_t begin = split * per_split * tile_keys, end = (split + 1) * per_split * tile_keys;
  return {begin < seqlen_k ? begin : seqlen_k, end < seqlen_k ? end : seqlen_k};
}

struct SplitWorkspace {
  int splits = 1;
  int64_t total_rows = 0;  // packed rows (host-known: batch * seqlen_q, or the varlen total)
  float* out_partial = nullptr;
  float* lse_partial = nullptr;
  // The splits of a row block run as one thread-block cluster and merge in its shared memory
  // (sm90, the key-split decode tiles: fa2/cluster_combine.cuh): no partials, no combine kernel.
  bool in_cluster = false;

  FA_HD int64_t out_offset(const AttnProblem& p, int split, int64_t packed_row, int64_t h) const {
    return ((split * total_rows + packed_row) * p.heads_q + h) * p.head_dim_v;
  }
  FA_HD int64_t lse_offset(const AttnProblem& p, int split, int64_t packed_row, int64_t h) const {
    return (split * total_rows + packed_row) * p.heads_q + h;
  }
};

// The combine that turns a split workspace into the problem's out and lse. Dense rows are (b, i)
// with the output's own strides; varlen rows are already packed, so they form one sequence.
inline CombineProblem split_combine_problem(const AttnProblem& p, const SplitWorkspace& ws) {
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  CombineProblem c;
  c.splits = ws.splits;
  c.batch = varlen ? 1 : p.batch;
  c.seqlen = varlen ? ws.total_rows : p.lens.seqlen_q;
  c.heads = p.heads_q;
  c.head_dim = p.head_dim_v;
  c.out_partial = ws.out_partial;
  c.out_partial_strides = {ws.total_rows * p.heads_q * p.head_dim_v, varlen ? 0 : p.lens.seqlen_q * p.heads_q * p.head_dim_v,
                           p.heads_q * p.head_dim_v, p.head_dim_v};
  c.lse_partial = ws.lse_partial;
  c.lse_partial_strides = {ws.total_rows * p.heads_q, varlen ? 0 : p.lens.seqlen_q * p.heads_q, p.heads_q, 1};
  c.out = p.out.data;
  c.out_dtype = p.out_dtype;
  c.out_strides = {0, varlen ? 0 : p.out.batch_stride, p.out.row_stride, p.out.head_stride};
  if (p.lse.defined()) {
    c.lse = p.lse.data;
    c.lse_strides = {0, varlen ? 0 : p.lse.batch_stride, p.lse.row_stride, p.lse.head_stride};
  }
  return c;
}

}  // namespace flashattn
