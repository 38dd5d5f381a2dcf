// The FA3 backward's tile shape, shared-memory layout and arguments (bwd_kernel.cuh).
//
// One CTA per (key block of kBlockN keys, kv head, sequence): 1 + kConsumers warpgroups. Warpgroup
// 0 is the producer: warp 0 TMA-loads K and V once, then Q (+ LSE) and dO (+ D) per step into
// kStages rings; warps 1 and 2 add each step's dQ to the fp32 workspace with bulk reductions.
// Consumer warpgroup c owns keys 64c .. 64c + 63 of the block and holds their dK and dV in
// registers over every step: each query head of the kv head's GQA group x each row block of
// kBlockM rows that sees the keys. All tiles are 64-element (128-byte) column blocks in the 128-byte swizzle.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/fast_divmod.h"
#include "common/problem.h"
#include "common/score.h"
#include "fa3/bwd_plan.h"

namespace flashattn::fa3 {

template <typename Element_, int kHeadDim_, int kBlockM_, bool kGeneralScore_, BwdVariant kVariant_ = BwdVariant{}>
struct BwdConfig {
  using Element = Element_;
  static constexpr BwdVariant kVariant = kVariant_;  // (bwd_plan.h)
  // Softcap or ALiBi: the logit per element, dS carries d logit / d s. Else dS leaves out the
  // softmax scale, which dK takes at the end and dQ in the conversion.
  static constexpr bool kGeneralScore = kGeneralScore_;
  static constexpr int kHeadDim = kHeadDim_;  // q/k and v (a call's smaller head dims run padded)
  static constexpr int kBlockM = kBlockM_;    // query rows per step
  static constexpr int kConsumers = 2;
  // Head dims over 128 (d256; d192 runs padded to it): dK and dV of 64 keys at every column no
  // longer fit one warpgroup's registers, so both warpgroups share a block of 64 keys and split
  // the head dim instead (bwd_consumer_wide.cuh): each computes S^T and dP^T for half of the
  // step's rows, P^T and dS^T meet in shared memory, and each accumulates dK, dV and dQ for its
  // half of the columns, adding dQ straight from registers (no room to stage it).
  static constexpr bool kWide = kHeadDim > 128;
  // Rows on the wgmma M side (BwdVariant::rows_on_m, bwd_consumer_rows.cuh): 80 keys, 40 per
  // warpgroup for S and dP; dK, dV and dQ split by columns as kWide. Its shared memory holds one
  // dO stage.
  static constexpr bool kRowsOnM = kVariant.rows_on_m;
  static constexpr int kBlockN = kRowsOnM ? 80 : kWide ? 64 : 64 * kConsumers;  // keys per CTA
  static constexpr int kStages = 2;                // Q ring
  static constexpr int kDoStages = kRowsOnM ? 1 : kStages;  // dO ring
  static constexpr int kDsStages = 2;              // dS tiles: a step's writes never meet the last step's dQ reads
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Steps of 128 rows (d64): S^T and dP^T take 128 of a consumer's registers. Plain scores only
  // (softcap and ALiBi spill there; bwd_variants.h).
  static constexpr bool kTallSteps = kBlockM == 128;
  static_assert(!kTallSteps || (kHeadDim == 64 && !kGeneralScore_), "128-row steps: d64, plain scores");
  // setmaxnreg split of the 64K registers: the launch's 168 per thread (64512), so 24 + 2 x 240
  // at most (a larger increase never returns). 128-row steps take 240 (40 + 2 x 232 measured the
  // same; docs/PERF.md, twentieth session); the 64-row kernels keep slack (24 + 2 x 240 measured
  // no faster).
  // Rows on M (dK^T and dV^T 160 registers, dQ slices 32 more) take 240 too.
  static constexpr int kConsumerRegisters = kTallSteps || kRowsOnM ? 240 : 232;
  static constexpr int kProducerRegisters = kTallSteps || kRowsOnM ? 24 : 32;
  static constexpr int kColumnBlocks = kHeadDim / 64;
  // dQ = dS K of a step (kBlockM x kHeadDim) in chunks of 64 rows x kDqCols columns, one per
  // consumer warpgroup: 64-row blocks of the step's rows, then column slices (d128: the two
  // 64-column halves). A step of one 64 x 64 chunk (d64) is split by keys instead: each
  // warpgroup multiplies its own 64 keys' dS by K, and both chunks add to the same rows; or, with
  // kDqAlternate, the warpgroups take turns computing the whole chunk over all keys (warpgroup
  // step % 2), one add per step.
  static constexpr bool kDqAlternate = kVariant.dq == BwdDq::Alternate;
  static constexpr bool kDqOverlap = kVariant.dq == BwdDq::Overlap;  // wide only (bwd_consumer_wide.cuh)
  static constexpr bool kDqOneChunk = !kWide && (kBlockM / 64) * (kHeadDim / 64) < kConsumers;
  static constexpr bool kDqSplitKeys = kDqOneChunk && !kDqAlternate;
  static constexpr int kDqRowBlocks = kBlockM / 64;
  static constexpr int kDqCols = kDqOneChunk ? kHeadDim : kBlockM * kHeadDim / (64 * kConsumers);
  static constexpr int kDqColChunks = kHeadDim / kDqCols;

  static constexpr int kKBytes = kBlockN * kHeadDim * 2;  // each of K and V
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;  // one stage, each of Q and dO
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;  // one stage of dS^T: [kBlockM / 64][kBlockN keys][64 rows]
  static constexpr int kPBytes = kWide ? kDsBytes : 0;     // one stage of P^T (wide: P meets in shared memory too)
  static constexpr int kDqBytes = kWide ? 0 : 64 * kDqCols * 4;  // one consumer's staged fp32 dQ chunk
  static constexpr int kRowBytes = kBlockM * 4;           // one stage of LSE or D
  // K, V, the Q and dO rings, dS, the dQ chunks, LSE and D, then the barriers; tiles 1024-aligned.
  static constexpr int kOffsetV = kKBytes;
  static constexpr int kOffsetQ = 2 * kKBytes;
  static constexpr int kOffsetDo = kOffsetQ + kStages * kQBytes;
  static constexpr int kOffsetDs = kOffsetDo + kDoStages * kQBytes;
  static constexpr int kOffsetP = kOffsetDs + kDsStages * kDsBytes;
  static constexpr int kOffsetDq = kOffsetP + kDsStages * kPBytes;
  static constexpr int kOffsetLse = kOffsetDq + kConsumers * kDqBytes;
  static constexpr int kOffsetDelta = kOffsetLse + kStages * kRowBytes;
  static constexpr int kOffsetBarriers = kOffsetDelta + kDoStages * kRowBytes;
  static constexpr int kSmemBytes = kOffsetBarriers + 256 /*barriers*/ + 1024 /*alignment*/;

  static_assert(kHeadDim % 64 == 0 && kBlockM % 64 == 0 && kDqCols % 64 == 0 && kHeadDim % kDqCols == 0, "tile shape");
  static_assert(kDqRowBlocks * kDqColChunks == (kDqOneChunk ? 1 : kConsumers), "one dQ chunk per consumer warpgroup");
  static_assert(!kDqAlternate || kDqOneChunk, "alternate dQ: steps of one 64 x 64 chunk (d64, 64 rows)");
  static_assert(!kDqOverlap || kWide, "overlapped dQ slices: the wide consumer");
  static_assert(!kRowsOnM || (kHeadDim == 256 && kBlockM == 64 && !kGeneralScore_ && kVariant.dq == BwdDq::Default),
                "rows on M: d256, 64-row steps, plain scores (its dQ slices always overlap dV and dK)");
  static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box has at most 256 rows");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm90 CTA");
};

// Tensor maps (4-D: head dim, heads, rows, sequences; boxes of 64 columns x kBlockM or kBlockN rows).
// dkv_by_tma: the epilogue stores dK and dV through dk and dv (BwdPlan::tma_store_dkv), else from
// registers.
struct BwdMaps {
  CUtensorMap q, k, v, dout, dk, dv;
  int dkv_by_tma;
};

// Everything else a launch passes. Workspaces, with R = rows_padded per (sequence, query head):
// lse_log2, delta [batch][heads_q][R] (cuda/bwd_row_stats.cuh); dq_accum [batch][heads_q] in
// 64-row slabs of kDqCols-column chunks (bwd_dq_layout.h); dq_semaphores [batch][heads_q][R / 64]
// (deterministic mode: key blocks that added to a row block).
struct BwdArgs {
  BwdProblem problem;
  const float* lse_log2 = nullptr;
  const float* delta = nullptr;
  float* dq_accum = nullptr;
  int* dq_semaphores = nullptr;
  int64_t rows_padded = 0;
  // The general score path's factors (common/score.h), formed on the host: kernel parameters
  // are read from the constant bank, not held in registers over the step loop.
  ScoreFactors score_factors{};
  bool deterministic = false;
  // Deterministic mode under a limit on the right (causal, windows): key blocks add to a row block
  // from the last to the first and the grid runs them in that order (see bwd_block).
  bool descending = false;
  // log2 of the (sequence, kv head) groups per section of the CTA order (BwdPlan::section_mb;
  // bwd_block): 0 runs the groups one after another. heads_k_divmod splits a group's index.
  int section_shift = 0;
  FastDivmod heads_k_divmod{};
  // log2 of BwdPlan::row_stagger (bwd_block).
  int row_stagger_shift = 0;
};

}  // namespace flashattn::fa3
