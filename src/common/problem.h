// A validated attention call, normalised for the backends: every storage form (dense, varlen,
// paged, batch-indexed cache) reduced to RowsViews and per-sequence lengths, every option to
// plain numbers. Built by src/api from the public parameters; backends never see TensorViews.
#pragma once

#include <cstdint>

#include "common/descale.h"
#include "common/host_device.h"
#include "common/mask.h"
#include "common/rows.h"
#include "common/score.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// Lengths read from index tensors are clamped into what the host knows is allocated (see rows.h):
// a varlen sequence's rows lie within total_q / total_k and within seqlen_q (the bound the
// workspaces are sized by), a paged sequence's keys within k_capacity, a cache's keys within its
// capacity, seqused_k within the stored keys. Valid contents are unchanged. (The clamps run in 32
// bits: the bounds fit int32, as the validated shapes and capacities do; 64-bit ones cost the
// forward kernels registers.)
struct SeqLens {
  int64_t seqlen_q = 0;  // dense length, or an upper bound (max_seqlen) with varlen
  int64_t seqlen_k = 0;  // likewise; a KV cache's capacity (key slots of one sequence)
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0;  // rows of q in all (dense: batch * seqlen_q; varlen: q's first dimension)
  int64_t total_k = 0;  // rows of k and v likewise (varlen: k's first dimension); 0 for KV caches
  const int32_t* seqused_k = nullptr;      // overrides the key length of each sequence
  const int32_t* cache_seqlens = nullptr;  // KV cache: keys = cache_seqlens[b] + seqlen_k_added
  int64_t seqlen_k_added = 0;
  const int32_t* k_leftpad = nullptr;      // KV cache: positions before k_leftpad[b] are not keys
                                           //   (k and v then carry the same row_offset)
  int64_t k_capacity = 0;  // paged (not a KV cache): the rows a sequence's block table covers

  // First row of varlen query sequence b in q's rows.
  FA_HD int64_t q_start(int64_t b) const { return clamp_entry(cu_seqlens_q[b], 0, int32_t(total_q)); }
  // Rows of query sequence b within q's allocation. Enough for a kernel whose grid covers seqlen_q
  // rows per sequence and that keeps no workspace sized by it (the FA3 forward: the clamp to
  // seqlen_q costs its d64 fp8 kernels a spill).
  FA_HD int64_t q_rows(int64_t b) const {
    if (cu_seqlens_q == nullptr) return seqlen_q;
    const int32_t first = clamp_entry(cu_seqlens_q[b], 0, int32_t(total_q));
    return clamp_entry(cu_seqlens_q[b + 1], first, int32_t(total_q)) - first;
  }
  // Rows of query sequence b, also within seqlen_q (the bound the workspaces are sized by).
  FA_HD int64_t q(int64_t b) const {
    const int32_t rows = int32_t(q_rows(b));
    return rows < int32_t(seqlen_q) ? rows : int32_t(seqlen_q);
  }
  // A KV cache (cache_seqlens or k_leftpad set).
  FA_HD bool is_cache() const { return cache_seqlens != nullptr || k_leftpad != nullptr; }
  // KV cache: the keys sequence b held before this call's appends (its first new position).
  FA_HD int64_t cache_length(int64_t b) const {
    if (cache_seqlens == nullptr) return 0;
    return clamp_entry(cache_seqlens[b], 0, seqlen_k > seqlen_k_added ? int32_t(seqlen_k - seqlen_k_added) : 0);
  }
  // KV cache: the end of sequence b's keys (a position; every slot without cache_seqlens).
  FA_HD int64_t cache_end(int64_t b) const {
    if (cache_seqlens == nullptr) return seqlen_k;
    const int32_t end = int32_t(cache_length(b)) + int32_t(seqlen_k_added);  // (<= max(seqlen_k, added))
    return end < int32_t(seqlen_k) ? end : int32_t(seqlen_k);
  }
  // The cache position of key 0 of sequence b (rotary positions and appends count from 0).
  FA_HD int64_t k_first_position(int64_t b) const {
    return k_leftpad != nullptr ? clamp_entry(k_leftpad[b], 0, int32_t(cache_end(b))) : 0;
  }
  // First row of varlen key sequence b in k's rows (not paged).
  FA_HD int64_t k_start(int64_t b) const { return clamp_entry(cu_seqlens_k[b], 0, int32_t(total_k)); }
  // The keys stored for sequence b as rows of k, dense or varlen (not a cache, not paged).
  FA_HD int64_t k_rows(int64_t b) const {
    if (cu_seqlens_k == nullptr) return seqlen_k;
    const int32_t first = clamp_entry(cu_seqlens_k[b], 0, int32_t(total_k));
    return clamp_entry(cu_seqlens_k[b + 1], first, int32_t(total_k)) - first;
  }
  // The keys stored for sequence b (seqused_k may use fewer).
  FA_HD int64_t k_stored(int64_t b) const {
    if (is_cache()) return cache_end(b) - k_first_position(b);
    if (cu_seqlens_k != nullptr && k_capacity > 0)
      return clamp_index(int64_t(cu_seqlens_k[b + 1]) - cu_seqlens_k[b], 0, k_capacity);
    return k_rows(b);
  }
  // The keys of sequence b that attention uses.
  FA_HD int64_t k(int64_t b) const { return used_keys(b, k_stored(b)); }
  // k(b) where k is stored as rows (dense or varlen), the only layouts the FA3 kernels take: the
  // cache and page code left out costs their 24-register producers no spill.
  FA_HD int64_t k_of_rows(int64_t b) const { return used_keys(b, k_rows(b)); }
  FA_HD int64_t used_keys(int64_t b, int64_t stored) const {
    return seqused_k != nullptr ? clamp_entry(seqused_k[b], 0, int32_t(stored)) : stored;
  }

  // At least every sequence's query and key count, from what the host knows without trusting a
  // caller's max_seqlen for CUDA cu_seqlens: dense lengths; with cu_seqlens also the rows of q or
  // k; a paged sequence's block-table capacity; a cache's capacity plus the keys appended to it.
  FA_HD int64_t host_bound() const {
    int64_t q = seqlen_q, k = seqlen_k;
    if (cu_seqlens_q != nullptr && total_q > q) q = total_q;
    if (cu_seqlens_k != nullptr && total_k > k) k = total_k;
    if (k_capacity > k) k = k_capacity;
    k += seqlen_k_added;
    return q > k ? q : k;
  }
};

struct AttnProblem {
  DType dtype = DType::F16;      // q, k, v
  DType out_dtype = DType::F16;  // out (and dq/dk/dv)
  int64_t batch = 0, heads_q = 0, heads_k = 0, head_dim = 0, head_dim_v = 0;
  RowsView q, k, v, out;
  LseView lse;  // optional in forward (data == nullptr), required in backward
  SeqLens lens;
  ScoreParams score;
  MaskParams mask;
  const float* alibi_slopes = nullptr;  // slope of (b, h) at alibi_slopes[b * alibi_batch_stride + h]
  int64_t alibi_batch_stride = 0;
  float dropout_p = 0.f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  int num_splits = 1;  // forward: 0 = choose, 1 = off, > 1 = split-KV then combine
  // fp8 inputs (dtype F8E4M3): the real inputs are q * descale_q, k * descale_k, v * descale_v.
  // All three are per (sequence, kv head); q's of a query head is that of its kv head.
  DescaleView q_descale, k_descale, v_descale;

  FA_HD int64_t kv_head(int64_t head_q) const { return head_q / (heads_q / heads_k); }
  // The descale factors of sequence b (1 where none was given): q's by query head, k's and v's by
  // kv head, so a caller indexes each tensor with the head it reads.
  FA_HD float descale_q(int64_t b, int64_t head_q) const { return q_descale.at(b, kv_head(head_q)); }
  FA_HD float descale_k(int64_t b, int64_t head_k) const { return k_descale.at(b, head_k); }
  FA_HD float descale_v(int64_t b, int64_t head_k) const { return v_descale.at(b, head_k); }
  FA_HD bool has_descales() const { return q_descale.defined() || k_descale.defined() || v_descale.defined(); }
  FA_HD float alibi_slope(int64_t b, int64_t h) const {
    return alibi_slopes != nullptr ? alibi_slopes[b * alibi_batch_stride + h] : 0.f;
  }
  // Softcap or ALiBi: the logit is more than scale * score, per element (the GPU kernels keep a
  // separate, straight-line instantiation for problems without them).
  FA_HD bool score_modifiers() const { return score.softcap > 0.f || alibi_slopes != nullptr; }
  // The GPU forwards' plain score path: no modifiers and a positive scale, because its running max
  // is taken on raw scores, which order like the logits only when scale > 0.
  FA_HD bool plain_forward_scores() const { return !score_modifiers() && score.scale > 0.f; }
};

// Kernels that form row +- window in 32 bits take windows narrowed by clamp_windows to the host's
// bound of the sequence lengths (the same keys stay visible): false when a window is set and that
// bound reaches 2^30, where even the narrowed sums could overflow.
inline bool clamp_windows_32(AttnProblem* p) {
  if (!p->mask.limits_keys()) return true;
  const int64_t bound = p->lens.host_bound();
  if (bound >= (int64_t(1) << 30)) return false;
  p->mask = clamp_windows(p->mask, bound, bound);
  return true;
}

// Backward adds dout and the gradients; out, lse and the options are those of the forward.
struct BwdProblem {
  AttnProblem fwd;
  RowsView dout, dq, dk, dv;
  DType dout_dtype = DType::F16;
  bool deterministic = false;
};

}  // namespace flashattn
