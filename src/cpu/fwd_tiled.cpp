// Tiled FlashAttention forward on the host: one work item per (batch, head, row block[, split]);
// K/V streamed in kBlockN tiles with an online softmax, so memory stays O(seqlen).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/pack_gqa.h"
#include "common/split_kv.h"
#include "cpu/cpu_backend.h"
#include "cpu/element_io.h"
#include "cpu/fwd_row_block.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"
#include "cpu/workspace.h"

namespace flashattn::cpu {

FwdScratch::FwdScratch(int64_t head_dim, int64_t head_dim_v)
    : q(size_t(kBlockM * head_dim)),
      kt(size_t(head_dim * kBlockN)),
      v(size_t(kBlockN * head_dim_v)),
      s(size_t(kBlockM * kBlockN)),
      o(size_t(kBlockM * head_dim_v)),
      row_max(kBlockM),
      row_sum(kBlockM),
      lse(kBlockM),
      row_buffer(size_t(kTransposeRows * std::max(head_dim, head_dim_v))) {}

void attend_row_block(const AttnProblem& p, int64_t b, int64_t h, int64_t row0, int rows,
                      int64_t key_begin, int64_t key_end, FwdScratch& ws) {
  const int64_t d = p.head_dim, dv = p.head_dim_v;
  const int64_t sq = p.lens.q(b), sk = p.lens.k(b);
  const int64_t hk = p.kv_head(h);
  float* o = ws.o.data();
  float* m = ws.row_max.data();
  float* l = ws.row_sum.data();
  std::fill(o, o + rows * dv, 0.f);
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.f);

  // fp8: tiles are dequantised as they load, so everything after sees the real inputs (this path
  // is the oracle of the fp8 kernels: no rounding of P).
  const bool dequantise = p.has_descales();
  const float descale_q = p.descale_q(b, h), descale_k = p.descale_k(b, hk), descale_v = p.descale_v(b, hk);

  const KeyRange visible = visible_keys(p.mask, row0, row0 + rows, sq, sk);
  const int64_t begin = std::max(visible.begin, key_begin), end = std::min(visible.end, key_end);
  if (begin < end) {
    load_tile(p.q, p.dtype, b, h, row0, rows, d, ws.q.data(), d);
    if (dequantise) scale_tile(ws.q.data(), rows, d, d, descale_q);
  }

  for (int64_t key0 = begin; key0 < end; key0 += kBlockN) {
    const int keys = int(std::min<int64_t>(kBlockN, end - key0));
    load_tile_transposed(p.k, p.dtype, b, hk, key0, keys, d, ws.kt.data(), kBlockN, ws.row_buffer.data());
    load_tile(p.v, p.dtype, b, hk, key0, keys, dv, ws.v.data(), dv);
    if (dequantise) {
      scale_tile(ws.kt.data(), d, keys, kBlockN, descale_k);  // transposed: head_dim rows of keys
      scale_tile(ws.v.data(), keys, dv, dv, descale_v);
    }

    float* s = ws.s.data();
    matmul_kmajor(ws.q.data(), d, rows, d, ws.kt.data(), kBlockN, keys, s, kBlockN);
    const TileCoords tile{b, h, row0, key0, rows, keys, sq, sk};
    scores_to_logits(p, tile, s, kBlockN, nullptr);

    // Online softmax: new running max, rescale O and the sum only when the max moved. max_of
    // skips NaN: a NaN logit beside a finite one turns the tile's sum, and so the row, NaN.
    for (int i = 0; i < rows; ++i) {
      float* si = s + i * kBlockN;
      const float new_max = std::max(m[i], simd::max_of(si, keys));
      if (new_max == -INFINITY) {  // nothing visible yet: weights stay 0
        // Unless the visible logits are all NaN: the row is NaN from here on (std::max keeps a
        // NaN running max).
        if (std::any_of(si, si + keys, [](float x) { return x != x; })) m[i] = l[i] = NAN;
        std::fill(si, si + keys, 0.f);
        continue;
      }
      const float max_log2 = new_max * kLog2e;
      exp2_shifted(si, keys, max_log2);
      const float tile_sum = simd::sum_of(si, keys);
      if (new_max != m[i]) {
        const float rescale = m[i] == -INFINITY ? 0.f : std::exp2(m[i] * kLog2e - max_log2);
        l[i] *= rescale;
        float* oi = o + i * dv;
        for (int64_t c = 0; c < dv; ++c) oi[c] *= rescale;
        m[i] = new_max;
      }
      l[i] += tile_sum;
    }
    if (p.dropout_p > 0.f) apply_dropout(p, tile, s, kBlockN);
    matmul_accumulate_visible(p, tile, s, kBlockN, ws.v.data(), dv, dv, o, dv);
  }

  // Normalise; a row that saw no key gets O = 0 and LSE = -inf.
  for (int i = 0; i < rows; ++i) {
    float* oi = o + i * dv;
    if (m[i] == -INFINITY || l[i] == 0.f) {
      std::fill(oi, oi + dv, 0.f);
      ws.lse[i] = -INFINITY;
      continue;
    }
    const float inv = 1.f / l[i];
    for (int64_t c = 0; c < dv; ++c) oi[c] *= inv;
    ws.lse[i] = m[i] + std::log(l[i]);
  }
}

namespace {

struct RowBlock {
  int64_t b, h, row0;
  int rows;
};

std::vector<RowBlock> row_blocks(const AttnProblem& p) {
  std::vector<RowBlock> blocks;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.lens.q(b);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t row0 = 0; row0 < sq; row0 += kBlockM)
        blocks.push_back({b, h, row0, int(std::min<int64_t>(kBlockM, sq - row0))});
  }
  return blocks;
}

int choose_splits(const AttnProblem& p, size_t n_blocks, int workers) {
  if (p.num_splits > 0) return p.num_splits;
  // Enough items for every worker when there are few row blocks (decoding), never splits
  // shorter than a couple of key tiles.
  if (n_blocks == 0 || int64_t(n_blocks) >= 2 * workers) return 1;
  int64_t max_keys = 0;
  for (int64_t b = 0; b < p.batch; ++b) max_keys = std::max(max_keys, p.lens.k(b));
  const int64_t by_keys = std::max<int64_t>(1, max_keys / (2 * kBlockN));
  const int64_t wanted = (2 * workers + int64_t(n_blocks) - 1) / int64_t(n_blocks);
  return int(std::clamp<int64_t>(std::min(wanted, by_keys), 1, 64));
}

void store_rows(const AttnProblem& p, const RowBlock& blk, const FwdScratch& ws) {
  for (int i = 0; i < blk.rows; ++i) {
    store_row(p.out.data, p.out.offset(blk.b, blk.row0 + i, blk.h), p.out_dtype, p.head_dim_v,
              ws.o.data() + i * p.head_dim_v);
    if (p.lse.defined()) p.lse.data[p.lse.offset(blk.b, blk.row0 + i, blk.h)] = ws.lse[i];
  }
}

}  // namespace

Status fwd(const AttnProblem& problem) {
  // Decoding with GQA: one pass over each KV head's keys for all its query heads.
  const AttnProblem p = can_pack_gqa_rows(problem) ? pack_gqa_rows(problem) : problem;
  const WorkerTeam team;
  const std::vector<RowBlock> blocks = row_blocks(p);
  const int splits = choose_splits(p, blocks.size(), team.size());
  std::vector<FwdScratch> scratch;
  scratch.reserve(size_t(team.size()));
  for (int w = 0; w < team.size(); ++w) scratch.emplace_back(p.head_dim, p.head_dim_v);

  if (splits <= 1) {
    team.parallel_for(int64_t(blocks.size()), [&](int64_t item, int worker) {
      const RowBlock& blk = blocks[size_t(item)];
      attend_row_block(p, blk.b, blk.h, blk.row0, blk.rows, 0, p.lens.k(blk.b), scratch[size_t(worker)]);
      store_rows(p, blk, scratch[size_t(worker)]);
    });
    return {};
  }

  // Split-KV (common/split_kv.h): each split leaves a normalised partial O and its LSE; combine()
  // merges them exactly and writes out and lse.
  SplitWorkspace ws;
  ws.splits = splits;
  ws.total_rows = p.lens.total_q;
  Scratch<float> out_partial(size_t(splits * ws.total_rows * p.heads_q * p.head_dim_v));
  Scratch<float> lse_partial(size_t(splits * ws.total_rows * p.heads_q));
  ws.out_partial = out_partial.data();
  ws.lse_partial = lse_partial.data();
  team.parallel_for(int64_t(blocks.size()) * splits, [&](int64_t item, int worker) {
    const RowBlock& blk = blocks[size_t(item / splits)];
    const int split = int(item % splits);
    const KeyRange keys = split_key_range(p.lens.k(blk.b), kBlockN, split, splits);
    FwdScratch& scratch_w = scratch[size_t(worker)];
    attend_row_block(p, blk.b, blk.h, blk.row0, blk.rows, keys.begin, keys.end, scratch_w);
    const int64_t base = packed_row_base(p, blk.b) + blk.row0;
    for (int i = 0; i < blk.rows; ++i) {
      std::copy(scratch_w.o.data() + i * p.head_dim_v, scratch_w.o.data() + (i + 1) * p.head_dim_v,
                ws.out_partial + ws.out_offset(p, split, base + i, blk.h));
      ws.lse_partial[ws.lse_offset(p, split, base + i, blk.h)] = scratch_w.lse[i];
    }
  });
  return combine(split_combine_problem(p, ws));
}

}  // namespace flashattn::cpu
