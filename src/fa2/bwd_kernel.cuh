// FlashAttention-2 backward on mma.sync tensor cores (sm80+).
//
// Three kernels, enqueued by bwd_launch.cu:
//   1. preprocess (src/cuda/bwd_row_stats.cuh, shared with FA3): D = rowsum(dO * O) and
//      LSE * log2(e) per (row, query head) into a workspace (rows padded; padding rows and rows
//      that saw no key get LSE = +inf, hence P = 0);
//   2. main: one CTA per (key block of kBlockN keys, kv head, sequence). K and V stay in shared
//      memory; the CTA loops over the query heads of its GQA group and the row blocks that can see
//      its keys, recomputes S^T = K Q^T and dP^T = V dO^T with the keys as the MMA's M dimension,
//      and accumulates dV += P_drop^T dO and dK += dS^T Q in registers (so GQA needs no atomics
//      for dK/dV). dS^T goes through shared memory to feed dQ += dS K, which is added to an fp32
//      workspace: with atomicAdd, or (deterministic) in key-block order behind a per-row-block
//      counter;
//   3. convert: dQ fp32 -> dtype.
// The math and the dropout bits are those of src/cpu/bwd_tiled.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "arch/sm80/cp_async.cuh"
#include "arch/sm80/ldmatrix.cuh"
#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/reduce.cuh"
#include "fa2/tile_load.cuh"
#include "common/mask.h"
#include "common/philox.h"
#include "common/problem.h"
#include "common/score.h"
#include "cuda/ordered_adds.cuh"
#include "fa2/dq_layout.h"

namespace flashattn::fa2 {

// Row padding of the workspaces: a multiple of every kBlockM, so row blocks never leave them.
inline constexpr int kBwdRowAlign = 128;
// The smallest kBlockM of any backward config (sizes the deterministic-mode counters).
inline constexpr int kBwdMinBlockM = 64;

// What the backward kernels read and write besides the problem. Workspace layouts, with
// R = rows_padded: lse_log2, delta: [batch][heads_q][R]; dq_accum: [batch][heads_q][R / 16]
// [dq_cols / 16][256], 16 x 16 tiles in the order of the main kernel's MMA accumulators
// (dq_tile_offset), so that a tile is added as two contiguous 512-byte halves;
// dq_counters: [batch][heads_q][R / kBwdMinBlockM].
struct BwdArgs {
  BwdProblem problem;
  float* lse_log2 = nullptr;  // LSE * log2(e); +inf where P must be 0
  float* delta = nullptr;     // D = rowsum(dO * O)
  float* dq_accum = nullptr;
  int* dq_counters = nullptr;
  int64_t rows_padded = 0;
  int dq_cols = 0;  // padded head dim of dq_accum
  // Factor of the dQ conversion: the softmax scale when the main kernel ran the plain score path
  // (which leaves the scale out of dS and applies it to dK and dQ at the end), else 1.
  float dq_scale = 1.f;
  bool deterministic = false;
  // sm90, atomic mode: each staged dQ tile is added by one bulk reduction (the TMA unit) instead of
  // vector atomics from every lane (BwdPlan::dq_bulk; other GPUs, the deterministic mode and
  // the dropout kernels ignore it).
  bool dq_bulk = false;
  // Atomic mode: CTAs start at different row blocks (always); the deterministic
  // mode keeps ascending order (its counters order the adds by key block).
  bool rotate_rows = false;
};

template <typename Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_, bool kDropout_,
          bool kGeneralScore_ = true, int kKeyTiles_ = 1>
struct BwdConfig {
  using Element = Element_;
  static constexpr bool kDropout = kDropout_;  // a template flag: Philox state costs registers
  // false: the plain score path, for softcap == 0 and no ALiBi (the launcher checks): the exponent
  // of P is one FFMA per element, and dS leaves out the softmax scale (dK is scaled at the end,
  // dQ by the conversion: BwdArgs::dq_scale). true: softcap and ALiBi are applied.
  static constexpr bool kGeneralScore = kGeneralScore_;
  static constexpr int kHeadDim = kHeadDim_;   // padded head dim (q/k and v), multiple of 32
  static constexpr int kBlockM = kBlockM_;     // query rows per step
  static constexpr int kBlockN = kBlockN_;     // keys per CTA
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;  // 2: the next step's Q/dO load overlaps this step
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowStride = kHeadDim + 8;  // Q, dO, K, V rows; +16 bytes against bank conflicts
  static constexpr int kTStride = kBlockM + 8;     // P^T and dS^T: one key per smem row

  // S^T/dP^T and dK/dV: warp w owns kKeyTiles m16 tiles of keys from (w % kWarpsKeys) * 16 *
  // kKeyTiles; the kWarpsSplit warps sharing those keys split the rows of S^T and the columns of
  // dK/dV. Two key tiles per warp read each Q/dO fragment once for both (S^T, dP^T, dV, dK): fewer
  // ldmatrix per MMA, which bounds this kernel (shared-memory bandwidth).
  static constexpr int kKeyTiles = kKeyTiles_;
  static constexpr int kWarpsKeys = kBlockN / (16 * kKeyTiles);
  static constexpr int kWarpsSplit = kWarps / kWarpsKeys;
  static constexpr int kRowsPerWarp = kBlockM / kWarpsSplit;
  static constexpr int kColTilesKV = kHeadDim / kWarpsSplit / 8;
  // One warp per key group holds all rows of its S^T: P^T and dS^T feed dV/dK from registers.
  // Otherwise P^T also goes through shared memory.
  static constexpr bool kPInSmem = kWarpsSplit > 1;
  // With 64+ dK/dV columns per warp held in registers, S^T/dP^T are computed for half the rows
  // at a time (K/V fragments are read twice) so that the kernel stays within 255 registers.
  static constexpr int kRowPasses = ((!kPInSmem && kColTilesKV >= 16) || kRowsPerWarp * kKeyTiles >= 128) ? 2 : 1;
  static constexpr int kRowsPerPass = kRowsPerWarp / kRowPasses;
  static constexpr int kRowTiles = kRowsPerPass / 8;  // n8 tiles of S^T per warp and pass

  // dQ: warp w owns kDqMTiles m16 tiles of rows from (w % kWarpsDqRows) * 16 * kDqMTiles and a
  // kHeadDim / kWarpsDqCols column slice, computed in chunks of kDqChunkTiles n8 tiles to bound the
  // live accumulators. Two m16 tiles per warp (d >= 128) share each K fragment between them: per
  // k-step 2 + 2 ldmatrix.x4 feed 8 MMAs where one m16 tile took 1 + 2 for 4 (and re-read the dS
  // fragments in every chunk); at d64 the column slices would shrink to 16 and save nothing. The
  // dropout and one-stage kernels keep one (no registers left for 16 more accumulators: spills).
  static constexpr int kDqMTiles = ((kHeadDim >= 128 || kBlockM >= 128) && !kDropout && kStages == 2) ? 2 : 1;
  static constexpr int kWarpsDqRows = kBlockM / (16 * kDqMTiles);
  static constexpr int kWarpsDqCols = kWarps / kWarpsDqRows;
  static constexpr int kColTilesDq = kHeadDim / kWarpsDqCols / 8;
  static constexpr int kDqChunkTiles = kColTilesDq < 4 ? kColTilesDq : 4;
  // For the sm90 bulk reductions and sm80's scalar atomics, dQ leaves the MMA accumulators through
  // a per-warp fp32 staging tile of 16 rows x 16 columns (two n8 tiles; the other paths add
  // straight from registers). Without
  // kPInSmem it lives in the current Q stage (no longer read once dS^T is complete); with
  // kPInSmem (whose dK/dV loop still reads Q after that barrier) in its own area.
  static constexpr int kDqStageFloats = 16 * 16;

  static constexpr int kSmemKV = kBlockN * kRowStride;  // elements, each of K and V
  static constexpr int kSmemRows = kBlockM * kRowStride;  // elements, per stage of Q and of dO
  static constexpr int kSmemT = kBlockN * kTStride;       // elements, each of P^T and dS^T
  static constexpr int kSmemElements = 2 * kSmemKV + 2 * kStages * kSmemRows + (kPInSmem ? 2 : 1) * kSmemT;
  static constexpr int kSmemBytes = int(sizeof(Element)) * kSmemElements + 2 * kStages * kBlockM * int(sizeof(float)) +
                                    (kPInSmem ? kWarps * kDqStageFloats * int(sizeof(float)) : 0);
  static_assert(kPInSmem || kSmemRows * int(sizeof(Element)) >= kWarps * kDqStageFloats * int(sizeof(float)),
                "the dQ staging tiles fit in one Q stage");

  static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0 && kBlockM % 16 == 0, "tile shape");
  static_assert(kWarps % kWarpsKeys == 0 && kWarps % kWarpsDqRows == 0 && kBlockM % (16 * kDqMTiles) == 0,
                "warp layout");
  static_assert(kRowTiles % 2 == 0 && kColTilesKV % 2 == 0 && kDqChunkTiles % 2 == 0 &&
                    kColTilesDq % kDqChunkTiles == 0,
                "tiles are taken in pairs by ldmatrix.x4");
  static_assert(kThreads % (kHeadDim / 8) == 0, "a thread's 16-byte chunks must share one column");
  static_assert(kBwdRowAlign % kBlockM == 0 && kBlockM % kBwdMinBlockM == 0, "workspace row padding");
  static_assert(kBlockM / 2 <= kThreads, "one thread per 16-byte chunk of LSE and D");
  static_assert(kBlockN % (16 * kKeyTiles) == 0 && (kKeyTiles == 1 || !kDropout),
                "key tiles per warp divide the block; dropout keeps one (its keep bits fill 32 bits)");
};


// Which query head (relative to the GQA group's first) and row block a step of a CTA works on.
struct BwdStep {
  int head;
  int row0;
};

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, 1) bwd_main_kernel(const BwdArgs args) {
  using Element = typename Config::Element;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  constexpr int kRowStride = Config::kRowStride, kTStride = Config::kTStride, kStages = Config::kStages;
  constexpr int kRowTiles = Config::kRowTiles, kColTilesKV = Config::kColTilesKV;
  constexpr int kRowsPerWarp = Config::kRowsPerWarp, kKeyTiles = Config::kKeyTiles;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* smem_k = reinterpret_cast<Element*>(smem_raw);
  Element* smem_v = smem_k + Config::kSmemKV;
  Element* smem_q = smem_v + Config::kSmemKV;             // [stage][kBlockM][kRowStride]
  Element* smem_do = smem_q + kStages * Config::kSmemRows;  // [stage][kBlockM][kRowStride]
  Element* smem_dst = smem_do + kStages * Config::kSmemRows;  // dS^T [kBlockN][kTStride]
  Element* smem_pt = smem_dst + Config::kSmemT;                // P_drop^T (kPInSmem only)
  float* smem_lse = reinterpret_cast<float*>(smem_raw + int(sizeof(Element)) * Config::kSmemElements);  // [stage][kBlockM]
  float* smem_delta = smem_lse + kStages * kBlockM;
  float* smem_dq_own = smem_delta + kStages * kBlockM;  // dQ staging (kPInSmem only)

  const BwdProblem& bp = args.problem;
  const AttnProblem& p = bp.fwd;
  const int64_t b = blockIdx.z, hk = blockIdx.y;
  const int key0 = int(blockIdx.x) * kBlockN;
  // Keys stored for this sequence; seqused_k may use fewer, the rest get zero gradients.
  const int stored_k = int(p.lens.k_stored(b));
  if (key0 >= stored_k) return;
  const int sq = int(p.lens.q(b)), sk = int(p.lens.k(b));
  const int keys_used = sk - key0 < 0 ? 0 : (sk - key0 < kBlockN ? sk - key0 : kBlockN);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;
  const int key_local = (warp % Config::kWarpsKeys) * 16 * kKeyTiles;  // this warp's first key in the tile
  const int split = warp / Config::kWarpsKeys;
  const int row_local0 = split * kRowsPerWarp;          // its first row of S^T
  const int col_kv0 = split * kColTilesKV * 8;          // its first column of dK/dV
  const int heads_per_group = int(p.heads_q / p.heads_k);

  float dk_acc[kKeyTiles][kColTilesKV][4], dv_acc[kKeyTiles][kColTilesKV][4];
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
    for (int t = 0; t < kColTilesKV; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk_acc[kt][t][e] = dv_acc[kt][t][e] = 0.f;

  int m_begin = 0, m_count = 0;
  if (keys_used > 0) {
    const KeyRange rows = visible_rows(p.mask, key0, key0 + keys_used, sq, sk);
    if (!rows.empty()) {
      m_begin = int(rows.begin / kBlockM);
      m_count = int((rows.end + kBlockM - 1) / kBlockM) - m_begin;
    }
  }
  const int steps = m_count * heads_per_group;
  // Step (head_rel, row block): the query head hq0 + head_rel of the group and the row block's
  // first row. Heads outer, row blocks inner; advanced by counters (no division per step). With
  // BwdArgs::rotate_rows each CTA starts at its own row block and wraps around, so that the CTAs
  // of one head do not all add to the same dQ rows at the same time.
  const int hq0 = int(hk) * heads_per_group;
  const int m_end = (m_begin + m_count) * kBlockM;
  const int first_row0 =
      (m_begin + (args.rotate_rows && !args.deterministic && m_count > 0 ? int(blockIdx.x) % m_count : 0)) * kBlockM;
  const auto next_step = [&](BwdStep& st) {
    st.row0 += kBlockM;
    if (st.row0 == m_end) st.row0 = m_begin * kBlockM;
    if (st.row0 == first_row0) ++st.head;
  };
  // Q and dO (never paged: block tables come only with the KV cache), LSE and D: source addresses
  // derived once per CTA; a step adds its head and row offsets. One thread per 16-byte chunk of
  // the LSE and D rows. The dropout kernels, which have no registers to spare (Philox), derive
  // these addresses (and the mask-tile bounds below) per step.
  constexpr bool kCtaAddresses = !Config::kDropout;
  using RowLoader = StridedTileLoader<Config, kBlockM>;
  const auto q_loader = [&] { return RowLoader(p.q, b, hq0, int(p.head_dim)); };
  const auto do_loader = [&] { return RowLoader(bp.dout, b, hq0, int(p.head_dim_v)); };
  const RowLoader q_cta = q_loader(), do_cta = do_loader();
  const int row_chunk = int(threadIdx.x);
  const bool loads_row_chunk = row_chunk < kBlockM / 2;
  const bool chunk_is_lse = row_chunk < kBlockM / 4;
  const auto row_src_at = [&] {
    return (chunk_is_lse ? args.lse_log2 + row_chunk * 4 : args.delta + (row_chunk - kBlockM / 4) * 4) +
           (b * p.heads_q + hq0) * args.rows_padded;
  };
  const float* const row_src = row_src_at();
  const uint32_t row_dst = sm80::smem_address(chunk_is_lse ? smem_lse + row_chunk * 4
                                                           : smem_delta + (row_chunk - kBlockM / 4) * 4);
  const auto load_step = [&](const BwdStep& st, int stage) {
    const int rows_valid = sq - st.row0;
    Element* const q_dst = smem_q + stage * Config::kSmemRows;
    Element* const do_dst = smem_do + stage * Config::kSmemRows;
    if constexpr (!kCtaAddresses) {
      load_tile_async<Config, kBlockM>(p.q, b, hq0 + st.head, st.row0, rows_valid, int(p.head_dim), q_dst);
      load_tile_async<Config, kBlockM>(bp.dout, b, hq0 + st.head, st.row0, rows_valid, int(p.head_dim_v), do_dst);
    } else {
      q_cta.load_head(st.head, st.row0, rows_valid, q_dst);
      do_cta.load_head(st.head, st.row0, rows_valid, do_dst);
    }
    if (loads_row_chunk)
      sm80::cp_async_16(row_dst + uint32_t(stage * kBlockM * int(sizeof(float))),
                        (kCtaAddresses ? row_src : row_src_at()) + int64_t(st.head) * args.rows_padded + st.row0, true);
  };

  BwdStep cur{0, first_row0};  // head relative to hq0
  if (steps > 0) {
    load_tile_async<Config, kBlockN>(p.k, b, hk, key0, keys_used, int(p.head_dim), smem_k);
    load_tile_async<Config, kBlockN>(p.v, b, hk, key0, keys_used, int(p.head_dim_v), smem_v);
    load_step(cur, 0);
    sm80::cp_async_commit();
  }

  const ScoreParams score = p.score;
  const bool softcap = score.softcap > 0.f;
  const float log2e = 1.4426950408889634f;
  const float scale_log2 = score.scale * log2e;
  const int shift = sk - sq;  // row i's diagonal key is i + shift
  const uint32_t dropout_threshold_bits = dropout_threshold(p.dropout_p);
  const float keep_scale = p.dropout_p > 0.f ? 1.f / (1.f - p.dropout_p) : 1.f;
  // ldmatrix.x4 address (elements) of the A fragment of this warp's key tile kt, k-step columns
  // from col: rows are keys in K, V (row stride kRowStride) and in P^T, dS^T (kTStride).
  const auto key_tile_a_offset = [&](int kt, int stride, int col) {
    return (key_local + 16 * kt + (lane % 8) + ((lane / 8) % 2) * 8) * stride + col + (lane / 16) * 8;
  };
  // This thread's keys in the sequence, per key tile kt: my_key[kt][0] for accumulator elements 0,1
  // and my_key[kt][1] for 2,3.
  int my_key[kKeyTiles][2];
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    my_key[kt][0] = key0 + key_local + 16 * kt + group;
    my_key[kt][1] = key0 + key_local + 16 * kt + group + 8;
  }
  // Row blocks [row0, rows_end) with full_rows_first <= row0 and rows_end - 1 <= full_rows_last
  // see every key of this block (tile_fully_visible, solved for the rows once per CTA in place of
  // 64-bit corner tests per step); clamped to [-1, sq] so that they fit an int.
  int full_rows_first = -1, full_rows_last = -1;
  {
    const auto clamp_rows = [&](int64_t r) { return int(r < -1 ? -1 : (r > sq ? sq : r)); };
    if (key0 + kBlockN <= sk) {
      full_rows_first =
          p.mask.window_right >= 0 ? clamp_rows(int64_t(key0) + kBlockN - 1 - shift - p.mask.window_right) : -1;
      full_rows_last = p.mask.window_left >= 0 ? clamp_rows(int64_t(key0) + p.mask.window_left - shift) : sq;
    }
  }
  // With two stages one barrier per step suffices (the forward's scheme): the one at the top
  // publishes this step's copies and tells that every warp is done with the previous step (its
  // Q/dO stage, which takes the prefetch of the next step, its dQ staging and dS^T). One stage
  // (and the deterministic mode, whose counter moves after the CTA's adds) keeps a barrier at
  // the end of the step.
  const bool barrier_at_end = kStages == 1 || args.deterministic;

#pragma unroll 1
  for (int step = 0; step < steps; ++step) {
    const int stage = kStages == 2 ? (step & 1) : 0;
    if constexpr (kStages == 2) {
      sm80::cp_async_wait<0>();
      __syncthreads();
      if (step + 1 < steps) {
        BwdStep next = cur;
        next_step(next);
        load_step(next, stage ^ 1);
        sm80::cp_async_commit();
      }
    } else {
      if (step > 0) {
        load_step(cur, 0);
        sm80::cp_async_commit();
      }
      sm80::cp_async_wait<0>();
      __syncthreads();
    }

    const int64_t h = hq0 + cur.head;
    const int row0 = cur.row0;
    const Element* q_tile = smem_q + stage * Config::kSmemRows;
    const Element* do_tile = smem_do + stage * Config::kSmemRows;
    const float* lse_tile = smem_lse + stage * kBlockM;
    const float* delta_tile = smem_delta + stage * kBlockM;

    const int rows_end = row0 + kBlockM < sq ? row0 + kBlockM : sq;
    const bool mask_tile = kCtaAddresses ? !(row0 >= full_rows_first && rows_end - 1 <= full_rows_last)
                                         : !tile_fully_visible(p.mask, row0, rows_end, key0, key0 + kBlockN, sq, sk);
    const float slope = p.alibi_slope(b, h);

    // dV += P_drop^T dO and dK += dS^T Q for the 16 tile rows of k-step `kstep`: M = this warp's
    // keys (each key tile's A fragments), N = its dK/dV columns (B fragments read once for all).
    const auto accumulate_dkdv = [&](int kstep, const uint32_t (&a_p)[kKeyTiles][4], const uint32_t (&a_ds)[kKeyTiles][4]) {
#pragma unroll
      for (int t = 0; t < kColTilesKV; t += 2) {
        uint32_t bdo[4], bq[4];  // b0,b1 of column tiles t and t + 1
        const int b_off = (kstep * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kRowStride + col_kv0 + t * 8 +
                          (lane / 16) * 8;
        sm80::ldmatrix_x4_trans(bdo, sm80::smem_address(do_tile + b_off));
#pragma unroll
        for (int kt = 0; kt < kKeyTiles; ++kt) {
          sm80::mma_m16n8k16<Element>(dv_acc[kt][t], a_p[kt], bdo[0], bdo[1]);
          sm80::mma_m16n8k16<Element>(dv_acc[kt][t + 1], a_p[kt], bdo[2], bdo[3]);
        }
        sm80::ldmatrix_x4_trans(bq, sm80::smem_address(q_tile + b_off));
#pragma unroll
        for (int kt = 0; kt < kKeyTiles; ++kt) {
          sm80::mma_m16n8k16<Element>(dk_acc[kt][t], a_ds[kt], bq[0], bq[1]);
          sm80::mma_m16n8k16<Element>(dk_acc[kt][t + 1], a_ds[kt], bq[2], bq[3]);
        }
      }
    };

#pragma unroll 1
    for (int pass = 0; pass < Config::kRowPasses; ++pass) {
      const int pass_row0 = row_local0 + pass * Config::kRowsPerPass;  // first tile row of the pass
      // Dropout keep bits of this thread's elements, bit 4t + e, drawn before the GEMMs so that
      // the Philox rounds do not compete with the S^T/dP^T accumulators for registers.
      uint32_t keep_bits = 0;
      if constexpr (Config::kDropout) {
        static_assert(kRowTiles * 4 <= 32, "one bit per element in a 32-bit mask");
#pragma unroll 1
        for (int i = 0; i < kRowTiles * 4; ++i) {
          const int row = row0 + pass_row0 + (i / 4) * 8 + 2 * quad + (i % 2);
          const int key = (i % 4) >= 2 ? my_key[0][1] : my_key[0][0];  // one key tile with dropout
          const bool keep =
              dropout_keep(p.dropout_seed, p.dropout_offset, b, p.heads_q, h, row, key, dropout_threshold_bits);
          keep_bits |= uint32_t(keep) << i;
        }
      }

      // S^T = K Q^T and dP^T = V dO^T for this warp's keys and the pass's rows.
      float st[kKeyTiles][kRowTiles][4], dpt[kKeyTiles][kRowTiles][4];
#pragma unroll
      for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
          for (int e = 0; e < 4; ++e) st[kt][t][e] = dpt[kt][t][e] = 0.f;
#pragma unroll
      for (int kstep = 0; kstep < Config::kHeadDim / 16; ++kstep) {
        uint32_t a_k[kKeyTiles][4], a_v[kKeyTiles][4];
#pragma unroll
        for (int kt = 0; kt < kKeyTiles; ++kt) {
          const int a_off = key_tile_a_offset(kt, kRowStride, kstep * 16);
          sm80::ldmatrix_x4(a_k[kt], sm80::smem_address(smem_k + a_off));
          sm80::ldmatrix_x4(a_v[kt], sm80::smem_address(smem_v + a_off));
        }
#pragma unroll
        for (int t = 0; t < kRowTiles; t += 2) {
          uint32_t bq[4], bdo[4];  // b0,b1 of row tiles t and t + 1
          const int b_off = (pass_row0 + t * 8 + (lane % 8) + (lane / 16) * 8) * kRowStride + kstep * 16 +
                            ((lane / 8) % 2) * 8;
          sm80::ldmatrix_x4(bq, sm80::smem_address(q_tile + b_off));
#pragma unroll
          for (int kt = 0; kt < kKeyTiles; ++kt) {
            sm80::mma_m16n8k16<Element>(st[kt][t], a_k[kt], bq[0], bq[1]);
            sm80::mma_m16n8k16<Element>(st[kt][t + 1], a_k[kt], bq[2], bq[3]);
          }
          sm80::ldmatrix_x4(bdo, sm80::smem_address(do_tile + b_off));
#pragma unroll
          for (int kt = 0; kt < kKeyTiles; ++kt) {
            sm80::mma_m16n8k16<Element>(dpt[kt][t], a_v[kt], bdo[0], bdo[1]);
            sm80::mma_m16n8k16<Element>(dpt[kt][t + 1], a_v[kt], bdo[2], bdo[3]);
          }
        }
      }

      // P, dropout, dS. Element (kt, t, e) is key my_key[kt][e / 2] and tile row pass_row0 + t*8 +
      // 2*quad + e%2.
      // Afterwards st holds P_drop and dpt holds dS = P * (dP_drop - D) * dlogit/ds. The plain path
      // has two copies, the per-element mask only in the one for tiles that need it (a CTA-uniform
      // branch); the general path one copy with the mask behind a runtime test (registers).
      const auto p_and_ds = [&](auto masked, bool mask_runtime) {
        constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
        for (int i = 0; i < kKeyTiles * kRowTiles; ++i) {
          const int kt = i / kRowTiles, t = i % kRowTiles;
          const int row_in_tile = pass_row0 + t * 8 + 2 * quad;
          const float2 lse2 = *reinterpret_cast<const float2*>(lse_tile + row_in_tile);
          const float2 delta2 = *reinterpret_cast<const float2*>(delta_tile + row_in_tile);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = row0 + row_in_tile + (e % 2);
            const int key = my_key[kt][e / 2];
            const float row_lse = (e % 2) ? lse2.y : lse2.x;
            const float row_delta = (e % 2) ? delta2.y : delta2.x;
            const float s = st[kt][t][e];
            float grad = Config::kGeneralScore ? score.scale : 1.f;  // plain: scale applied to dK, dQ
            float exponent;
            if constexpr (Config::kGeneralScore) {
              float logit = s * score.scale;
              if (softcap) {
                logit = score_to_logit(score, s);
                grad = logit_grad_factor(score, logit);
              }
              if (slope != 0.f) {
                const int dist = row + shift - key;
                logit -= slope * float(dist < 0 ? -dist : dist);
              }
              exponent = logit * log2e - row_lse;
            } else {
              exponent = s * scale_log2 - row_lse;
            }
            if (kMasked || mask_runtime) {
              const int diag = row + shift;
              // Plain path: bitwise, not short-circuit (selects instead of branches); the general
              // path keeps the short-circuit form, whose branches cost it fewer registers.
              const bool visible =
                  kMasked ? (key < sk) & ((p.mask.window_right < 0) | (key <= diag + p.mask.window_right)) &
                                ((p.mask.window_left < 0) | (key >= diag - p.mask.window_left))
                          : key < sk && (p.mask.window_right < 0 || key <= diag + p.mask.window_right) &&
                                (p.mask.window_left < 0 || key >= diag - p.mask.window_left);
              if (!visible) exponent = -INFINITY;
            }
            const float prob = sm80::fast_exp2(exponent);
            float dp = dpt[kt][t][e];
            float prob_drop = prob;
            if constexpr (Config::kDropout) {
              const bool keep = (keep_bits >> (4 * t + e)) & 1u;
              prob_drop = keep ? prob * keep_scale : 0.f;
              dp = keep ? dp * keep_scale : 0.f;
            }
            st[kt][t][e] = prob_drop;
            dpt[kt][t][e] = prob * (dp - row_delta) * grad;
          }
        }
      };
      if constexpr (Config::kGeneralScore)
        p_and_ds(std::false_type{}, mask_tile);
      else if (mask_tile)
        p_and_ds(std::true_type{}, false);
      else
        p_and_ds(std::false_type{}, false);

      // dS^T (and P_drop^T) to shared memory, one key per row: packed pairs of consecutive rows.
#pragma unroll
      for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int off = (key_local + 16 * kt + group + half * 8) * kTStride + pass_row0 + t * 8 + 2 * quad;
            *reinterpret_cast<uint32_t*>(smem_dst + off) =
                sm80::pack2<Element>(dpt[kt][t][2 * half], dpt[kt][t][2 * half + 1]);
            if constexpr (Config::kPInSmem)
              *reinterpret_cast<uint32_t*>(smem_pt + off) = sm80::pack2<Element>(st[kt][t][2 * half], st[kt][t][2 * half + 1]);
          }

      if constexpr (!Config::kPInSmem) {
        // The S^T accumulators of row tiles 2k, 2k+1 are the A fragment of k-step k.
#pragma unroll
        for (int k = 0; k < kRowTiles / 2; ++k) {
          uint32_t a_p[kKeyTiles][4], a_ds[kKeyTiles][4];
#pragma unroll
          for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float(&p_tile)[4] = st[kt][2 * k + i / 2];
              const float(&ds_tile)[4] = dpt[kt][2 * k + i / 2];
              a_p[kt][i] = sm80::pack2<Element>(p_tile[2 * (i % 2)], p_tile[2 * (i % 2) + 1]);
              a_ds[kt][i] = sm80::pack2<Element>(ds_tile[2 * (i % 2)], ds_tile[2 * (i % 2) + 1]);
            }
          accumulate_dkdv(pass_row0 / 16 + k, a_p, a_ds);
        }
      }
    }

    __syncthreads();  // dS^T (and P^T) of every warp complete
    if constexpr (Config::kPInSmem) {
      // dV += P^T dO and dK += dS^T Q, A operands from shared memory.
#pragma unroll
      for (int kstep = 0; kstep < kBlockM / 16; ++kstep) {
        uint32_t a_p[kKeyTiles][4], a_ds[kKeyTiles][4];
#pragma unroll
        for (int kt = 0; kt < kKeyTiles; ++kt) {
          const int a_off = key_tile_a_offset(kt, kTStride, kstep * 16);
          sm80::ldmatrix_x4(a_p[kt], sm80::smem_address(smem_pt + a_off));
          sm80::ldmatrix_x4(a_ds[kt], sm80::smem_address(smem_dst + a_off));
        }
        accumulate_dkdv(kstep, a_p, a_ds);
      }
    }

    // dQ += dS K: M = rows, K = keys. A = dS read transposed from dS^T, B = K read transposed.
    constexpr int kDqM = Config::kDqMTiles;
    const int dq_row_local = (warp % Config::kWarpsDqRows) * 16 * kDqM;
    const int dq_col0 = (warp / Config::kWarpsDqRows) * Config::kColTilesDq * 8;
    const int64_t ws_rows = (b * p.heads_q + h) * args.rows_padded;
    float* const dq_stage = (Config::kPInSmem ? smem_dq_own : reinterpret_cast<float*>(smem_q + stage * Config::kSmemRows)) +
                            warp * Config::kDqStageFloats;
    // (read on sm90 only; the dropout kernels keep the atomics: no registers to spare)
    const bool bulk_dq = !Config::kDropout && args.dq_bulk && !args.deterministic;
    // The warp's first dQ tile in dq_accum (whose rows are kHeadDim / 16 tiles wide: dq_cols is
    // the config's head dim); its other tiles are at compile-time offsets, but for the chunk.
    float* const dq_warp = args.dq_accum + dq_tile_index(ws_rows + row0 + dq_row_local, dq_col0, Config::kHeadDim);
    const int head_dim = int(p.head_dim);
    int* counter = nullptr;
    if (args.deterministic) {
      // Key blocks add to a row block in ascending order: wait for those before this one. The
      // contributors of a row block are the consecutive key blocks its visible keys touch.
      const int rows_here_end = row0 + kBlockM < sq ? row0 + kBlockM : sq;
      const int first_block = int(visible_keys(p.mask, row0, rows_here_end, sq, sk).begin / kBlockN);
      counter = args.dq_counters + (b * p.heads_q + h) * (args.rows_padded / kBwdMinBlockM) + row0 / kBlockM;
      if (threadIdx.x == 0) gpu::bwd_wait_counter(counter, int(blockIdx.x) - first_block);
      __syncthreads();
    }
#pragma unroll 1
    for (int chunk = 0; chunk < Config::kColTilesDq / Config::kDqChunkTiles; ++chunk) {
      constexpr int kTiles = Config::kDqChunkTiles;
      const int col_base = dq_col0 + chunk * kTiles * 8;
      if (col_base >= head_dim) break;  // padding columns of dQ are never read
      float dq[kDqM][kTiles][4];
#pragma unroll
      for (int m = 0; m < kDqM; ++m)
#pragma unroll
        for (int t = 0; t < kTiles; ++t) dq[m][t][0] = dq[m][t][1] = dq[m][t][2] = dq[m][t][3] = 0.f;
#pragma unroll
      for (int kstep = 0; kstep < kBlockN / 16; ++kstep) {
        uint32_t a[kDqM][4];
#pragma unroll
        for (int m = 0; m < kDqM; ++m)
          sm80::ldmatrix_x4_trans(a[m], sm80::smem_address(smem_dst + (kstep * 16 + (lane % 8) + (lane / 16) * 8) * kTStride +
                                                           dq_row_local + m * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int t = 0; t < kTiles; t += 2) {
          uint32_t bk[4];
          sm80::ldmatrix_x4_trans(bk, sm80::smem_address(smem_k + (kstep * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kRowStride +
                                                         col_base + t * 8 + (lane / 16) * 8));
#pragma unroll
          for (int m = 0; m < kDqM; ++m) {
            sm80::mma_m16n8k16<Element>(dq[m][t], a[m], bk[0], bk[1]);
            sm80::mma_m16n8k16<Element>(dq[m][t + 1], a[m], bk[2], bk[3]);
          }
        }
      }
      // Each pair of n8 tiles of an m16 tile is one 16 x 16 tile of dq_accum, its n8 half j the
      // float4s of the lanes' accumulators dq[m][t + j] (dq_tile_offset). sm90 atomics and the
      // deterministic adds go straight from registers; the bulk reductions (sm90) and sm80's
      // scalar atomics go through the warp's staging tile. Rows past the sequence add zeros (their
      // Q and dO rows load as zeros and their LSE is +inf: P and dS are 0) to workspace rows that
      // the conversion never reads.
#pragma unroll
      for (int m = 0; m < kDqM; ++m) {
#pragma unroll
        for (int t = 0; t < kTiles; t += 2) {
          if (col_base + t * 8 >= head_dim) break;  // (a pair's second tile may be padding: + 0)
          float* const dst_tile = dq_warp + (m * (Config::kHeadDim / 16) + (col_base - dq_col0 + t * 8) / 16) * 256;
          auto half_of = [&](int j) { return make_float4(dq[m][t + j][0], dq[m][t + j][1], dq[m][t + j][2], dq[m][t + j][3]); };
          if (args.deterministic) {
            // This CTA is the only writer now; read around L1, which may hold an older copy.
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float4* const dst = reinterpret_cast<float4*>(dst_tile + j * 128 + lane * 4);
              const float4 old = __ldcg(dst), v = half_of(j);
              __stcg(dst, make_float4(old.x + v.x, old.y + v.y, old.z + v.z, old.w + v.w));
            }
            continue;
          }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          if (!bulk_dq) {
#pragma unroll
            for (int j = 0; j < 2; ++j) sm90::red_add_v4(dst_tile + j * 128 + lane * 4, half_of(j));  // one vector reduction each
            continue;
          }
          if (lane == 0) sm90::tma_store_wait_read();  // the previous tile's bulk read
#endif
          __syncwarp();  // the previous pair's reads of the staging tile are done
#pragma unroll
          for (int j = 0; j < 2; ++j) *reinterpret_cast<float4*>(dq_stage + j * 128 + lane * 4) = half_of(j);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          // The whole tile in one reduction.
          sm90::fence_async_shared();  // the stores, before the TMA unit reads them
          __syncwarp();
          if (lane == 0) {
            sm90::bulk_reduce_add(dst_tile, dq_stage, 256 * sizeof(float));
            sm90::tma_store_commit();
          }
#else
          // sm80: scalar adds, lanes on consecutive words (128 contiguous bytes per add).
          __syncwarp();
          const bool full_rows = row0 + kBlockM <= sq;  // no row of the step past the sequence
          const int tile_row0 = row0 + dq_row_local + m * 16;  // sequence row of the m16 tile's row 0
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int off = 32 * i + lane;
            if (full_rows || tile_row0 + dq_tile_row(off) < sq) atomicAdd(dst_tile + off, dq_stage[off]);
          }
#endif
        }
      }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The last bulk reduction's read of the staging tile, before the next step's barrier lets the
    // tile (in the Q stage, without kPInSmem) be refilled.
    if (bulk_dq && lane == 0) sm90::tma_store_wait_read();
#endif
    if (barrier_at_end) {
      if (args.deterministic) __threadfence();  // this CTA's dQ adds visible before the counter moves
      __syncthreads();  // every warp is done with this stage and with dS^T before they are refilled
      if (args.deterministic && threadIdx.x == 0) gpu::bwd_signal_counter(counter);
    }
    next_step(cur);
  }
  sm80::cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (!Config::kDropout && args.dq_bulk && !args.deterministic && lane == 0) sm90::tma_store_wait();  // bulk reductions complete
#endif

  // dK and dV of every stored key of the block; keys no row saw (or beyond seqused_k) get 0.
  Element* dk = static_cast<Element*>(bp.dk.data);
  Element* dv = static_cast<Element*>(bp.dv.data);
  const float dk_scale = Config::kGeneralScore ? 1.f : score.scale;  // plain path: dS was unscaled
#pragma unroll
  for (int i = 0; i < 2 * kKeyTiles; ++i) {
    const int kt = i / 2, half = i % 2;
    const int key = my_key[kt][half];
    if (key >= stored_k) continue;
    Element* dk_row = dk + bp.dk.offset(b, key, hk);
    Element* dv_row = dv + bp.dv.offset(b, key, hk);
#pragma unroll
    for (int t = 0; t < kColTilesKV; ++t) {
      const int col = col_kv0 + t * 8 + 2 * quad;
      if (col < p.head_dim)
        *reinterpret_cast<uint32_t*>(dk_row + col) =
            sm80::pack2<Element>(dk_acc[kt][t][2 * half] * dk_scale, dk_acc[kt][t][2 * half + 1] * dk_scale);
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(dv_row + col) = sm80::pack2<Element>(dv_acc[kt][t][2 * half], dv_acc[kt][t][2 * half + 1]);
    }
  }
}

}  // namespace flashattn::fa2
