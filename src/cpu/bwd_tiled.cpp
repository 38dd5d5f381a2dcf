// Tiled FlashAttention backward on the host. P is recomputed from the saved LSE, never stored:
//   D  = rowsum(dO * O)                                   (preprocess)
//   dV = P_drop^T dO,  dP = (dO V^T) * keep / (1 - p),  dS = P * (dP - D) * dlogit/ds
//   dK = dS^T Q,       dQ = dS K
// Pass 1 runs over key blocks (dK, dV accumulated per item), pass 2 over row blocks (dQ). Each output element is owned by one work item and summed in a fixed order, so
// the CPU backward is deterministic without atomics; the price is computing P and dP twice.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/split_kv.h"
#include "cpu/cpu_backend.h"
#include "cpu/element_io.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_ops.h"
#include "cpu/workspace.h"

namespace flashattn::cpu {
namespace {

struct BwdScratch {
  BwdScratch(int64_t d, int64_t dv)
      : q(size_t(kBlockM * d)), dout(size_t(kBlockM * dv)), kt(size_t(d * kBlockN)),
        vt(size_t(dv * kBlockN)), k(size_t(kBlockN * d)), p(size_t(kBlockM * kBlockN)),
        p_drop(size_t(kBlockM * kBlockN)), dp(size_t(kBlockM * kBlockN)),
        grad_factor(size_t(kBlockM * kBlockN)), acc_a(size_t(std::max(kBlockN, kBlockM) * d)),
        acc_b(size_t(kBlockN * dv)), lse(kBlockM), delta(kBlockM),
        row_buffer(size_t(kTransposeRows * std::max(d, dv))) {}
  Scratch<float> q, dout, kt, vt, k, p, p_drop, dp, grad_factor, acc_a, acc_b, lse, delta, row_buffer;
};

// Rows of k/v stored for sequence b (seqused_k may use fewer).
int64_t stored_keys(const AttnProblem& p, int64_t b) { return p.lens.k_stored(b); }

// Loads the row tile's Q, dO, LSE and D.
void load_row_tile(const BwdProblem& bp, const float* delta_all, int64_t b, int64_t h, int64_t row0,
                   int rows, BwdScratch& ws) {
  const AttnProblem& p = bp.fwd;
  load_tile(p.q, p.dtype, b, h, row0, rows, p.head_dim, ws.q.data(), p.head_dim);
  load_tile(bp.dout, bp.dout_dtype, b, h, row0, rows, p.head_dim_v, ws.dout.data(), p.head_dim_v);
  const int64_t base = packed_row_base(p, b) + row0;
  for (int i = 0; i < rows; ++i) {
    ws.lse[i] = p.lse.data[p.lse.offset(b, row0 + i, h)];
    ws.delta[i] = delta_all[(base + i) * p.heads_q + h];
  }
}

// With kt/vt holding the key tile: P, P with dropout, and dS (in ws.dp) for the row tile. P and
// dS are exactly 0 where the mask hides the key, even in a row whose LSE, D or dP is NaN: the
// products below would carry a NaN there to keys (dK, dV) or rows (dQ) that never saw it.
void recompute_tile(const BwdProblem& bp, const TileCoords& tile, BwdScratch& ws, bool want_p_drop) {
  const AttnProblem& p = bp.fwd;
  float* s = ws.p.data();
  matmul_kmajor(ws.q.data(), p.head_dim, tile.rows, p.head_dim, ws.kt.data(), kBlockN, tile.keys, s, kBlockN);
  scores_to_logits(p, tile, s, kBlockN, ws.grad_factor.data());
  for (int i = 0; i < tile.rows; ++i) {
    float* pi = s + i * kBlockN;
    if (ws.lse[i] == -INFINITY) {  // the row saw no key in the forward: no gradient flows
      std::fill(pi, pi + tile.keys, 0.f);
      continue;
    }
    const float lse_log2 = ws.lse[i] * kLog2e;
    exp2_shifted(pi, tile.keys, lse_log2);
  }
  zero_hidden(p, tile, s, kBlockN);
  const bool dropout = p.dropout_p > 0.f;
  if (want_p_drop) {
    std::copy(s, s + tile.rows * kBlockN, ws.p_drop.data());
    if (dropout) apply_dropout(p, tile, ws.p_drop.data(), kBlockN);
  }
  float* dp = ws.dp.data();
  matmul_kmajor(ws.dout.data(), p.head_dim_v, tile.rows, p.head_dim_v, ws.vt.data(), kBlockN,
                tile.keys, dp, kBlockN);
  if (dropout) apply_dropout(p, tile, dp, kBlockN);
  for (int i = 0; i < tile.rows; ++i) {
    float* dpi = dp + i * kBlockN;
    const float* pi = s + i * kBlockN;
    const float* gi = ws.grad_factor.data() + i * kBlockN;
    for (int j = 0; j < tile.keys; ++j) dpi[j] = pi[j] * (dpi[j] - ws.delta[i]) * gi[j];
  }
  zero_hidden(p, tile, dp, kBlockN);
}

void store_tile(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0, int rows,
                int64_t dim, const float* src) {
  for (int r = 0; r < rows; ++r) store_row(view.data, view.offset(b, row0 + r, head), dtype, dim, src + r * dim);
}

}  // namespace

Status bwd(const BwdProblem& bp) {
  const AttnProblem& p = bp.fwd;
  const int64_t d = p.head_dim, dv = p.head_dim_v;
  const int64_t total_rows = packed_row_base(p, p.batch);
  const WorkerTeam team;
  std::vector<BwdScratch> scratch;
  scratch.reserve(size_t(team.size()));
  for (int w = 0; w < team.size(); ++w) scratch.emplace_back(d, dv);

  // Preprocess: D = rowsum(dO * O), one float per (row, head).
  Scratch<float> delta(size_t(std::max<int64_t>(1, total_rows * p.heads_q)));
  team.parallel_for(p.batch * p.heads_q, [&](int64_t item, int worker) {
    const int64_t b = item / p.heads_q, h = item % p.heads_q;
    float* o_row = scratch[size_t(worker)].acc_a.data();
    float* do_row = scratch[size_t(worker)].acc_b.data();
    for (int64_t i = 0; i < p.lens.q(b); ++i) {
      load_row(p.out.data, p.out.offset(b, i, h), p.out_dtype, dv, o_row);
      load_row(bp.dout.data, bp.dout.offset(b, i, h), bp.dout_dtype, dv, do_row);
      float sum = 0.f;
      for (int64_t c = 0; c < dv; ++c) sum += o_row[c] * do_row[c];
      delta[size_t((packed_row_base(p, b) + i) * p.heads_q + h)] = sum;
    }
  });

  // Pass 1: dK and dV, one work item per (batch, kv head, key block); GQA sums the query heads of
  // the group inside the item.
  struct KeyBlock {
    int64_t b, hk, key0;
  };
  std::vector<KeyBlock> key_blocks;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_k; ++hk)
      for (int64_t key0 = 0; key0 < stored_keys(p, b); key0 += kBlockN) key_blocks.push_back({b, hk, key0});
  const int64_t group = p.heads_q / p.heads_k;

  team.parallel_for(int64_t(key_blocks.size()), [&](int64_t item, int worker) {
    const KeyBlock& kb = key_blocks[size_t(item)];
    BwdScratch& ws = scratch[size_t(worker)];
    const int64_t sq = p.lens.q(kb.b), sk = p.lens.k(kb.b);
    const int stored = int(std::min<int64_t>(kBlockN, stored_keys(p, kb.b) - kb.key0));
    const int keys = int(std::clamp<int64_t>(sk - kb.key0, 0, stored));  // keys used (seqused_k)
    float* dk = ws.acc_a.data();
    float* dv_acc = ws.acc_b.data();
    std::fill(dk, dk + stored * d, 0.f);
    std::fill(dv_acc, dv_acc + stored * dv, 0.f);
    if (keys > 0) {
      load_tile_transposed(p.k, p.dtype, kb.b, kb.hk, kb.key0, keys, d, ws.kt.data(), kBlockN, ws.row_buffer.data());
      load_tile_transposed(p.v, p.dtype, kb.b, kb.hk, kb.key0, keys, dv, ws.vt.data(), kBlockN, ws.row_buffer.data());
      const KeyRange rows = visible_rows(p.mask, kb.key0, kb.key0 + keys, sq, sk);
      for (int64_t h = kb.hk * group; h < (kb.hk + 1) * group; ++h)
        for (int64_t row0 = rows.begin; row0 < rows.end; row0 += kBlockM) {
          const int n_rows = int(std::min<int64_t>(kBlockM, rows.end - row0));
          load_row_tile(bp, delta.data(), kb.b, h, row0, n_rows, ws);
          const TileCoords tile{kb.b, h, row0, kb.key0, n_rows, keys, sq, sk};
          recompute_tile(bp, tile, ws, /*want_p_drop=*/true);
          matmul_accumulate_at_visible(p, tile, ws.p_drop.data(), kBlockN, ws.dout.data(), dv, dv, dv_acc, dv);
          matmul_accumulate_at_visible(p, tile, ws.dp.data(), kBlockN, ws.q.data(), d, d, dk, d);
        }
    }
    store_tile(bp.dk, p.out_dtype, kb.b, kb.hk, kb.key0, stored, d, dk);
    store_tile(bp.dv, p.out_dtype, kb.b, kb.hk, kb.key0, stored, dv, dv_acc);
  });

  // Pass 2: dQ, one work item per (batch, query head, row block).
  struct RowBlock {
    int64_t b, h, row0;
  };
  std::vector<RowBlock> row_blocks;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t row0 = 0; row0 < p.lens.q(b); row0 += kBlockM) row_blocks.push_back({b, h, row0});

  team.parallel_for(int64_t(row_blocks.size()), [&](int64_t item, int worker) {
    const RowBlock& rb = row_blocks[size_t(item)];
    BwdScratch& ws = scratch[size_t(worker)];
    const int64_t sq = p.lens.q(rb.b), sk = p.lens.k(rb.b);
    const int n_rows = int(std::min<int64_t>(kBlockM, sq - rb.row0));
    const int64_t hk = p.kv_head(rb.h);
    float* dq = ws.acc_a.data();
    std::fill(dq, dq + n_rows * d, 0.f);
    load_row_tile(bp, delta.data(), rb.b, rb.h, rb.row0, n_rows, ws);
    const KeyRange keys = visible_keys(p.mask, rb.row0, rb.row0 + n_rows, sq, sk);
    for (int64_t key0 = keys.begin; key0 < keys.end; key0 += kBlockN) {
      const int n_keys = int(std::min<int64_t>(kBlockN, keys.end - key0));
      load_tile_transposed(p.k, p.dtype, rb.b, hk, key0, n_keys, d, ws.kt.data(), kBlockN, ws.row_buffer.data());
      load_tile_transposed(p.v, p.dtype, rb.b, hk, key0, n_keys, dv, ws.vt.data(), kBlockN, ws.row_buffer.data());
      load_tile(p.k, p.dtype, rb.b, hk, key0, n_keys, d, ws.k.data(), d);
      const TileCoords tile{rb.b, rb.h, rb.row0, key0, n_rows, n_keys, sq, sk};
      recompute_tile(bp, tile, ws, /*want_p_drop=*/false);
      matmul_accumulate_visible(p, tile, ws.dp.data(), kBlockN, ws.k.data(), d, d, dq, d);
    }
    store_tile(bp.dq, p.out_dtype, rb.b, rb.h, rb.row0, n_rows, d, dq);
  });
  return {};
}

}  // namespace flashattn::cpu
