// The FA3 backward's tile scheduler: which key block a CTA owns and which steps (query head of the
// GQA group x row block) it walks. Every role computes this at the top of the kernel, so that the
// producer, the dQ writer and the consumers agree on the steps without talking.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/mask.h"
#include "common/problem.h"

namespace flashattn::fa3 {

struct BwdBlock {
  int b, hk;
  int n;             // key block index: keys key0 .. key0 + kBlockN - 1
  int key0;
  int sq, sk;        // this sequence's query rows and keys (seqused_k applied)
  int stored_k;      // key rows stored for it (>= sk); dK and dV rows key0 .. stored_k - 1 are written
  int keys_used;     // keys of the block below sk: the rest are masked, their gradients 0
  int m_begin, m_end;  // row blocks [m_begin, m_end) with a row that sees a key of the block
  int heads_per_group;
  FA_HD bool exists() const { return key0 < stored_k; }
  FA_HD int steps() const { return (m_end - m_begin) * heads_per_group; }
};

// Grid (key blocks of the longest sequence, heads_k, batch). The hardware starts CTAs in block
// order, so in the ascending order (key block = blockIdx.x) a causal call's longest blocks start
// first. `descending` runs the last key block first: the deterministic mode orders the dQ adds of
// a row block from its last key block down, and a CTA must only wait for CTAs started before it.
// Row blocks stop at the workspaces' rows (rows_padded, from max_seqlen_q): a device cu_seqlens
// longer than the max_seqlen_q the caller promised then cannot reach past them.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ BwdBlock bwd_block(const AttnProblem& p, int64_t rows_padded, bool descending) {
  BwdBlock blk;
  blk.b = int(blockIdx.z);
  blk.hk = int(blockIdx.y);
  blk.n = descending ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  blk.key0 = blk.n * kBlockN;
  blk.stored_k = p.lens.cu_seqlens_k != nullptr ? p.lens.cu_seqlens_k[blk.b + 1] - p.lens.cu_seqlens_k[blk.b] : int(p.lens.seqlen_k);
  blk.sq = int(p.lens.q(blk.b));
  blk.sk = int(p.lens.k_of_rows(blk.b));
  blk.keys_used = blk.sk - blk.key0 < 0 ? 0 : (blk.sk - blk.key0 < kBlockN ? blk.sk - blk.key0 : kBlockN);
  blk.heads_per_group = int(p.heads_q) / int(p.heads_k);  // 32-bit: no 64-bit division call
  blk.m_begin = blk.m_end = 0;
  if (blk.keys_used > 0) {
    const KeyRange rows = visible_rows(p.mask, blk.key0, blk.key0 + blk.keys_used, blk.sq, blk.sk);
    if (!rows.empty()) {
      blk.m_begin = int(rows.begin / kBlockM);
      blk.m_end = int((rows.end + kBlockM - 1) / kBlockM);
      if (blk.m_end > int(rows_padded / kBlockM)) blk.m_end = int(rows_padded / kBlockM);
      if (blk.m_begin > blk.m_end) blk.m_begin = blk.m_end;
    }
  }
  return blk;
}

// f(step, g, h, m) for every step of the block in order: query head h (= g of the kv head's GQA
// group, outer), row block m (inner).
template <typename F>
__device__ __forceinline__ void bwd_for_each_step(const BwdBlock& blk, F&& f) {
  uint32_t step = 0;
  for (int g = 0; g < blk.heads_per_group; ++g) {
    const int h = blk.hk * blk.heads_per_group + g;
    for (int m = blk.m_begin; m < blk.m_end; ++m, ++step) f(step, g, h, m);
  }
}

// Deterministic mode: how many key blocks add to row block m (rows row0 .. row0 + kBlockM - 1)
// before this one. The contributors are the consecutive key blocks that the rows' visible keys
// touch (visible_keys; the blocks' own row ranges, visible_rows, include m exactly for them).
// Ascending: from the first one up; descending: from the last one down. 32-bit, with the windows
// of clamp_windows (the launch checks rows + keys < 2^31).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int bwd_add_rank(const MaskParams& m, const BwdBlock& blk, int row0, bool descending) {
  const int shift = blk.sk - blk.sq;
  const int rows_end = row0 + kBlockM < blk.sq ? row0 + kBlockM : blk.sq;
  if (!descending) {
    const int first_key = m.window_left >= 0 && row0 + shift - m.window_left > 0 ? row0 + shift - m.window_left : 0;
    return blk.n - first_key / kBlockN;
  }
  const int end_key = m.window_right >= 0 && rows_end + shift + m.window_right < blk.sk ? rows_end + shift + m.window_right : blk.sk;
  return (end_key - 1) / kBlockN - blk.n;
}

}  // namespace flashattn::fa3
