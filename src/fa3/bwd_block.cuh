// The FA3 backward's tile scheduler: which key block a CTA owns and which steps (query head of the
// GQA group x row block) it walks. Every role computes this at the top of the kernel, so that the
// producer, the dQ writer and the consumers agree on the steps without talking.
#pragma once

#include <cstdint>

#include "common/fast_divmod.h"
#include "common/host_device.h"
#include "common/mask.h"
#include "common/problem.h"
#include "fa3/tile_order.h"

namespace flashattn::fa3 {

struct BwdBlock {
  int b, hk;
  int n;             // key block index: keys key0 .. key0 + kBlockN - 1
  int key0;
  int sq, sk;        // this sequence's query rows and keys (seqused_k applied)
  int stored_k;      // key rows stored for it (>= sk); dK and dV rows key0 .. stored_k - 1 are written
  int keys_used;     // keys of the block below sk: the rest are masked, their gradients 0
  int m_begin, m_end;  // row blocks [m_begin, m_end) with a row that sees a key of the block
  int m_first;         // the row block each query head's walk starts at (BwdPlan::row_stagger)
  int heads_per_group;
  FA_HD bool exists() const { return key0 < stored_k; }
  FA_HD int steps() const { return (m_end - m_begin) * heads_per_group; }
  // The row block walked after m: the walk runs m_first .. m_end - 1, then m_begin .. m_first - 1.
  FA_HD int next_row_block(int m) const { return m + 1 < m_end ? m + 1 : m_begin; }
};

// Which (sequence, kv head) group and which of its key blocks a CTA takes.
struct BwdCoords {
  int n, hk, b;
};

// Grid (key blocks of the longest sequence, heads_k, batch). The hardware starts CTAs in block
// order: with section_shift 0 the CTA at blockIdx takes rank blockIdx.x of group (blockIdx.y,
// blockIdx.z); with section_shift > 0 the CTA at linear position i takes scheduled_tile's work
// tile of i (tile_order.h): in sections of 2^section_shift groups, rank k of every group of the
// section, then rank k + 1 (the launch checks that positions fit 31 bits). Either way a group's
// rank k + 1 starts after its rank k, as the deterministic order needs. Rank k is key block k
// (ascending: a causal call's longest blocks start first) or, with `descending`, the k-th from the
// last: the deterministic mode orders the dQ adds of a row block from its last key block down,
// and a CTA must only wait for CTAs started before it. heads_k divides a group index
// (hk + heads_k * b).
__device__ __forceinline__ BwdCoords bwd_coords(int section_shift, const FastDivmod& heads_k, bool descending) {
  BwdCoords c{int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
  if (section_shift > 0) {
    const TileOfPosition tile = scheduled_tile_of(int(gridDim.x), section_shift, c.n, c.hk + int(gridDim.y) * c.b);
    c.n = tile.rank;
    c.b = heads_k.divmod(tile.head, &c.hk);
  }
  if (descending) c.n = int(gridDim.x) - 1 - c.n;
  return c;
}

// The CTA's work from its coordinates. Row blocks stop at the workspaces' rows (rows_padded, from
// max_seqlen_q): a device cu_seqlens longer than the max_seqlen_q the caller promised then cannot
// reach past them. The walk of key block n starts (n mod 2^stagger_shift) / 2^stagger_shift of the
// way along its row blocks.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ BwdBlock bwd_block(const AttnProblem& p, int64_t rows_padded, const BwdCoords& c, int stagger_shift) {
  BwdBlock blk;
  blk.b = c.b;
  blk.hk = c.hk;
  blk.n = c.n;
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
  blk.m_first = blk.m_begin + (((blk.n & ((1 << stagger_shift) - 1)) * (blk.m_end - blk.m_begin)) >> stagger_shift);
  return blk;
}

// f(step, g, h, m) for every step of a block with steps, in order: query head h (= g of the kv
// head's GQA group, outer), row block m (inner, from m_first round to the one before it).
template <typename F>
__device__ __forceinline__ void bwd_for_each_step(const BwdBlock& blk, F&& f) {
  uint32_t step = 0;
#pragma unroll 1
  for (int g = 0; g < blk.heads_per_group; ++g) {
    const int h = blk.hk * blk.heads_per_group + g;
    int m = blk.m_first;
#pragma unroll 1
    do {  // a block with steps walks each query head's row blocks round once
      f(step, g, h, m);
      ++step;
      m = blk.next_row_block(m);
    } while (m != blk.m_first);
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
