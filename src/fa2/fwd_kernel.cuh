// FlashAttention-2 forward on mma.sync tensor cores (sm80+).
//
// One CTA per (row block of kBlockM query rows, query head, sequence). Each warp owns 16 * kMTiles
// rows (FA2's split along rows: no cross-warp reduction in the softmax), except on the 16-row decode
// tiles, whose warps split each tile's keys and merge once at the end. K and V tiles of kBlockN
// keys stream through shared memory in a two-stage cp.async pipeline with one barrier per tile;
// S = Q K^T and O += P V run on m16n8k16 MMAs, with P handed from the S accumulators to the A
// operand in registers (and Q's fragments kept in registers where that does not spill).
// Shared-memory rows are padded by 16 bytes, which keeps ldmatrix free of bank conflicts for
// every head dim.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "arch/sm80/cp_async.cuh"
#include "arch/sm80/ldmatrix.cuh"
#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/grid_dependency.cuh"
#include "fa2/cluster_combine.cuh"
#include "fa2/tile_load.cuh"
#include "common/mask.h"
#include "common/pack_gqa.h"
#include "common/philox.h"
#include "common/problem.h"
#include "common/score.h"
#include "common/split_kv.h"

namespace flashattn::fa2 {

// Shared memory per SM of the device code being compiled (host code: the largest, sm90's).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870)
inline constexpr int kSmemPerSm = 164 * 1024;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
inline constexpr int kSmemPerSm = 100 * 1024;
#else
inline constexpr int kSmemPerSm = 228 * 1024;
#endif

template <typename Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kDropout_,
          bool kGeneralScore_ = true, bool kQInRegs_ = false, bool kPackGqa_ = false>
struct FwdConfig {
  using Element = Element_;
  // Dropout is a template flag: its Philox state would otherwise take registers from every call.
  static constexpr bool kDropout = kDropout_;
  // false: the plain score path, for softcap == 0, no ALiBi and scale > 0 (the launcher checks):
  // the running max is kept on raw scores q.k and the scale is folded into the exponent (one FFMA
  // per element). true: softcap and ALiBi are applied (each behind a uniform runtime check).
  static constexpr bool kGeneralScore = kGeneralScore_;
  static constexpr int kHeadDim = kHeadDim_;  // head dim the kernel runs (q/k and v): 32, 64, .., 256
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  // Decode tiles of 16 rows: the warps split each K/V tile's keys instead of the rows, every warp
  // keeping its own running max, sum and O over its keys (merged once, after the key loop), so all
  // warps compute and the SM's four schedulers share the math that one warp per CTA did.
  static constexpr bool kWarpsSplitKeys = kBlockM == 16 && kWarps > 1;
  static constexpr int kMTiles = kWarpsSplitKeys ? 1 : kBlockM / (16 * kWarps);  // m16 tiles per warp:
                                                            // K/V fragments loaded once serve all of them
  static constexpr int kWarpKeys = kWarpsSplitKeys ? kBlockN / kWarps : kBlockN;  // keys of a tile per warp
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowStride = kHeadDim + 8;  // elements; +16 bytes against bank conflicts
  // K/V stages: the next tile's K and V load during this tile's math (one barrier per tile).
  static constexpr int kStages = 2;
  // The key-split decode tiles keep K and V rows unpadded, chunk c of row r at c ^ (r % 8) within
  // its 128-byte group (SmemRows, tile_load.cuh): the 16-byte copies of a 128-byte line of global
  // memory then fill one aligned 128-byte block of shared memory and leave as one L2 request
  // (padded rows cut each line's request in two: docs/PERF.md), and ldmatrix's eight rows of a
  // chunk still fall in eight different bank groups.
  static constexpr bool kSwizzleKV = kWarpsSplitKeys;
  static constexpr int kKVRowStride = kSwizzleKV ? kHeadDim : kRowStride;
  static constexpr int kSmemQ = kBlockM * kRowStride;
  static constexpr int kSmemKV = kBlockN * kKVRowStride;
  static constexpr int kSmemBytes = int(sizeof(Element)) * (kSmemQ + 2 * kStages * kSmemKV);
  // The L2 fetches 128 bytes around each 16-byte K/V copy of the decode tiles (cp.async's
  // .L2::128B hint; measured faster there, docs/PERF.md).
  static constexpr int kL2Prefetch = kBlockM == 16 ? 128 : 0;
  // Added at launch for paged K/V: where the rows of two tiles lie (the kernel; PagedRow).
  static constexpr int kPagesSmemBytes = 2 * kBlockN * 2 * int(sizeof(int32_t));
  // CTAs of 128 threads per SM that shared memory allows at best on the architecture being
  // compiled (1 KB reserved per CTA). At 1 or 2 the launch bounds say so, and ptxas does not squeeze
  // registers (spilling) for a third CTA that could never be resident; 0 leaves ptxas its choice.
  static constexpr int kSmemCtas = kSmemPerSm / (kSmemBytes + 1024);
  static constexpr int kMinBlocks = kThreads == 128 && kSmemCtas <= 2 ? kSmemCtas : 0;
  static constexpr int kNTilesS = kWarpKeys / 8;  // n8 tiles of S per warp
  static constexpr int kNTilesO = kHeadDim / 8;   // n8 tiles of O per warp
  // The softmax's running max moves only when passed by more than this (log2 units); see the kernel.
  static constexpr float kRescaleSlack = 8.f;
  // Q's A fragments stay in registers across the key loop (kHeadDim / 16 * kMTiles * 4 of them)
  // instead of being re-read from shared memory for every key tile.
  static constexpr bool kQInRegs = kQInRegs_;
  // The query heads of a KV head packed into the rows (common/pack_gqa.h, can_pack_gqa_queries):
  // one CTA per (row block, KV head, sequence), row t * G + g being token t of query head
  // h_k * G + g; the mask and ALiBi take the row's token and head.
  static constexpr bool kPackGqa = kPackGqa_;
  static_assert(!(kPackGqa && kDropout), "dropout is drawn per query head and row: never packed");
  static_assert(kHeadDim % 32 == 0 && kWarpKeys % 16 == 0 && kBlockN % kWarpKeys == 0 &&
                    (kWarpsSplitKeys || kBlockM % (16 * kWarps) == 0),
                "tile shape");
  static_assert(!(kWarpsSplitKeys && kDropout), "dropout runs on row-split tiles");
  // Key-split warps merge through the K/V stages after the loop: warps 1.. leave O (float4 per
  // lane and n8 tile) and each row's max and sum there (merge_key_split_warps).
  static constexpr int kMergeBytes = (kWarps - 1) * 32 * (kNTilesO * 16 + 2 * 8);
  static_assert(!kWarpsSplitKeys || kMergeBytes <= 2 * kStages * kSmemKV * int(sizeof(Element)), "merge space");
  // Split-KV in a cluster: the CTA's share for the others (cluster_combine.cuh), after the merge's.
  static constexpr int kClusterPartialOffset = (kMergeBytes + 15) / 16 * 16;

};

// Whether a row's running max takes this tile's max: when it passes the running max by more than
// the slack, and when it is NaN (NaN in, NaN out). A NaN running max stays, also against a tile the
// row cannot see (-inf): resetting it would report a row that saw nothing, out 0 and LSE -inf.
__device__ __forceinline__ bool moves_row_max(float tile_max, float row_max, float slack) {
  return tile_max > row_max + slack || tile_max != tile_max;
}

// Key-split warps (FwdConfig::kWarpsSplitKeys) each hold the same rows' running max (log2 units),
// their lanes' partial sums and O over their share of the keys. Warp 0 takes the others' through
// shared memory (`merge`, the K/V stages: no copy is in flight after the key loop) and rescales
// every share to the largest max, as split-KV's combine does across CTAs. Returns whether this
// warp is warp 0, which then holds the whole rows.
template <typename Config>
__device__ __forceinline__ bool merge_key_split_warps(float (&o)[1][Config::kNTilesO][4], float (&row_max)[2],
                                                      float (&row_sum)[2], unsigned char* merge, int warp, int lane) {
  constexpr int kNTilesO = Config::kNTilesO, kOthers = Config::kWarps - 1;
  float4* o_shares = reinterpret_cast<float4*>(merge);                // [warp - 1][t][lane]
  float2* stats = reinterpret_cast<float2*>(o_shares + kOthers * kNTilesO * 32);  // [warp - 1][r][lane]
  __syncthreads();  // every warp is done with the last K/V tile
  if (warp > 0) {
#pragma unroll
    for (int t = 0; t < kNTilesO; ++t)
      o_shares[((warp - 1) * kNTilesO + t) * 32 + lane] = make_float4(o[0][t][0], o[0][t][1], o[0][t][2], o[0][t][3]);
#pragma unroll
    for (int r = 0; r < 2; ++r) stats[((warp - 1) * 2 + r) * 32 + lane] = make_float2(row_max[r], row_sum[r]);
  }
  __syncthreads();
  if (warp > 0) return false;
  // A share that saw no key (max -inf) weighs 0; a NaN max makes the row NaN, as in the loop.
  const auto weight = [](float share_max, float max) {
    return share_max == -INFINITY ? 0.f : sm80::fast_exp2(share_max - max);
  };
  float own[2], others[kOthers][2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float max = row_max[r];
#pragma unroll
    for (int w = 0; w < kOthers; ++w) max = sm80::max_nan(max, stats[(w * 2 + r) * 32 + lane].x);
    own[r] = weight(row_max[r], max);
    float sum = row_sum[r] * own[r];
#pragma unroll
    for (int w = 0; w < kOthers; ++w) {
      const float2 share = stats[(w * 2 + r) * 32 + lane];
      others[w][r] = weight(share.x, max);
      sum = fmaf(share.y, others[w][r], sum);
    }
    row_max[r] = max;
    row_sum[r] = sum;
  }
#pragma unroll
  for (int t = 0; t < kNTilesO; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][t][e] *= own[e / 2];
#pragma unroll
    for (int w = 0; w < kOthers; ++w) {
      const float4 share = o_shares[(w * kNTilesO + t) * 32 + lane];
      o[0][t][0] = fmaf(share.x, others[w][0], o[0][t][0]);
      o[0][t][1] = fmaf(share.y, others[w][0], o[0][t][1]);
      o[0][t][2] = fmaf(share.z, others[w][1], o[0][t][2]);
      o[0][t][3] = fmaf(share.w, others[w][1], o[0][t][3]);
    }
  }
  return true;
}

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinBlocks)
    fwd_kernel(const AttnProblem p, const SplitWorkspace split_ws, const bool stage_pages, const QueryRowPack pack) {
  using Element = typename Config::Element;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kRowStride = Config::kRowStride;
  constexpr int kMTiles = Config::kMTiles, kNTilesS = Config::kNTilesS, kNTilesO = Config::kNTilesO;
  constexpr int kRows = 2 * kMTiles;  // rows a thread holds: group and group + 8 of each m16 tile
  // Launched as a programmatic dependent on sm90 (fwd_launch.cuh): what the kernel before it in
  // the stream writes (a decode step's appended keys, its rotated queries) is read after this wait,
  // and nothing is written before it.
  sm90::wait_on_prerequisite_grids();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* smem_q = reinterpret_cast<Element*>(smem_raw);
  Element* smem_k = smem_q + Config::kSmemQ;  // [stage][kBlockN][kRowStride]
  Element* smem_v = smem_k + Config::kStages * Config::kSmemKV;
  // Paged calls where the launcher had the shared memory (stage_pages): where each row of the next
  // two K/V tiles lies, [tile & 1][row] (kPagesSmemBytes past the K/V stages).
  PagedRow* smem_rows = reinterpret_cast<PagedRow*>(smem_v + Config::kStages * Config::kSmemKV);

  // blockIdx.x = row block * splits + split; without split-KV there is one split. blockIdx.y: the
  // query head, or the KV head where query heads are packed into rows.
  constexpr bool kPackGqa = Config::kPackGqa;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int split = int(blockIdx.x) % split_ws.splits;
  const int row0 = int(blockIdx.x) / split_ws.splits * kBlockM;
  // sq: the rows of (b, h); tokens: its query tokens, which the mask aligns with the keys (one
  // per row unless packed: then G x seqlen_q rows).
  const int sq = kPackGqa ? pack.rows : int(p.lens.q(b)), sk = int(p.lens.k(b));
  const int tokens = kPackGqa ? int(p.lens.seqlen_q) : sq;
  if (row0 >= sq) return;
  const int64_t hk = kPackGqa ? h : p.kv_head(h);
  const int64_t head0 = kPackGqa ? h * pack.group.divisor : h;  // the query head of row 0
  // The query token of a row (packed: row / G, its query head head0 + row % G).
  const auto token_of = [&](int row) { return kPackGqa ? pack.group.div(row) : row; };
  const int rows_here = sq - row0 < kBlockM ? sq - row0 : kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;
  // Row-split tiles: this warp's 16 * kMTiles rows; key-split ones: all rows, kWarpKeys keys of
  // each tile from warp_key0 on.
  const int warp_q_row = Config::kWarpsSplitKeys ? 0 : warp * 16 * kMTiles;  // within the tile
  const int warp_row0 = row0 + warp_q_row;
  const int warp_key0 = Config::kWarpsSplitKeys ? warp * Config::kWarpKeys : 0;
  // A warp whose rows are all past the sequence (decoding: a few rows per tile) still loads its
  // share of every K/V tile and meets every barrier, but skips the math.
  const bool warp_without_rows = warp_row0 >= sq;

  KeyRange keys = kPackGqa ? visible_keys(p.mask, token_of(row0), token_of(row0 + rows_here - 1) + 1, tokens, sk)
                           : visible_keys(p.mask, row0, row0 + rows_here, sq, sk);
  if (split_ws.splits > 1) {
    const KeyRange share = split_key_range(sk, kBlockN, split, split_ws.splits);
    keys = {max(keys.begin, share.begin), min(keys.end, share.end)};
  }
  const int tile_begin = int(keys.begin / kBlockN);
  const int tile_end = keys.empty() ? tile_begin : int((keys.end + kBlockN - 1) / kBlockN);

  // Row r of this thread is warp_row0 + (r / 2) * 16 + group + (r % 2) * 8; its diagonal key is
  // token + sk - tokens (causal and window limits and the ALiBi distance are relative to it). Packed
  // rows keep each one's diagonal and ALiBi slope (that of its query head) in registers.
  const int diag0 = warp_row0 + group + sk - sq;
  int row_diag[kPackGqa ? kRows : 1];
  float row_slope[kPackGqa && Config::kGeneralScore ? kRows : 1];
  if constexpr (kPackGqa) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      int g;
      const int token = pack.group.divmod(warp_row0 + (r / 2) * 16 + group + (r % 2) * 8, &g);
      row_diag[r] = token + sk - tokens;
      if constexpr (Config::kGeneralScore) row_slope[r] = p.alibi_slope(b, head0 + g);
    }
  }
  const auto diag_of = [&](int r) {
    if constexpr (kPackGqa) return row_diag[r];
    else return diag0 + (r / 2) * 16 + (r % 2) * 8;
  };
  // Keys [unmasked_lo, unmasked_hi) are visible to every row of this warp, so a tile inside needs
  // no per-element mask: tile_fully_visible for this warp's rows, derived once in place of 64-bit
  // corner tests per tile. (Packed: the tokens of the warp's first and last rows, a row's token
  // growing with the row; rows past the last only widen the masked range.)
  const int warp_diag_first = token_of(warp_row0) + sk - tokens;
  const int warp_diag_last =
      kPackGqa ? token_of(warp_row0 + 16 * kMTiles - 1) + sk - tokens : warp_diag_first + 16 * kMTiles - 1;
  const int unmasked_lo =
      p.mask.window_left >= 0 ? int(max(int64_t(0), int64_t(warp_diag_last) - p.mask.window_left)) : 0;
  const int unmasked_hi =
      p.mask.window_right >= 0 ? int(min(int64_t(sk), int64_t(warp_diag_first) + p.mask.window_right + 1)) : sk;

  float o[kMTiles][kNTilesO][4];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int t = 0; t < kNTilesO; ++t) o[m][t][0] = o[m][t][1] = o[m][t][2] = o[m][t][3] = 0.f;
  // row_max: the running max in exponent units (log2, scale folded in); row_sum: this thread's
  // share, reduced over the quad at the end.
  float row_max[kRows], row_sum[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
  }

  constexpr float kRescaleSlack = Config::kRescaleSlack;
  constexpr float kLn2 = 0.6931471805599453f;
  const ScoreParams score = p.score;
  const float slope = kPackGqa ? 0.f : p.alibi_slope(b, h);
  const float log2e = 1.4426950408889634f;
  const bool softcap = score.softcap > 0.f;
  // s holds logits (general path) or raw scores (plain path, scale > 0): the exponent of P is
  // s * exp_scale - row_max, and the LSE in natural-log units is (row_max + log2(sum)) * ln 2.
  const float exp_scale = Config::kGeneralScore ? log2e : score.scale * log2e;
  const uint32_t dropout_threshold_bits = dropout_threshold(p.dropout_p);
  const float keep_scale = p.dropout_p > 0.f ? 1.f / (1.f - p.dropout_p) : 1.f;

  // K/V tiles: dense, varlen and batch-indexed layouts through loaders whose addresses are derived
  // once; paged caches look each row's page up per tile.
  const bool kv_paged = p.k.block_table != nullptr || p.v.block_table != nullptr;
  constexpr bool kSwizzleKV = Config::kSwizzleKV;
  using KVRows = SmemRows<Config, kSwizzleKV>;
  const StridedTileLoader<Config, kBlockN, kSwizzleKV> k_loader(p.k, b, hk, int(p.head_dim));
  const StridedTileLoader<Config, kBlockN, kSwizzleKV> v_loader(p.v, b, hk, int(p.head_dim_v));
  const auto load_k = [&](int tile, int stage) {
    const int key0 = tile * kBlockN;
    Element* k_dst = smem_k + stage * Config::kSmemKV;
    if (kv_paged) load_tile_async<Config, kBlockN, kSwizzleKV>(p.k, b, hk, key0, sk - key0, int(p.head_dim), k_dst);
    else k_loader.load(key0, sk - key0, k_dst);
  };
  const auto load_v = [&](int tile, int stage) {
    const int key0 = tile * kBlockN;
    Element* v_dst = smem_v + stage * Config::kSmemKV;
    if (kv_paged) load_tile_async<Config, kBlockN, kSwizzleKV>(p.v, b, hk, key0, sk - key0, int(p.head_dim_v), v_dst);
    else v_loader.load(key0, sk - key0, v_dst);
  };

  // Two stages over a paged cache: where each row of a tile lies (page, row in the page) is staged
  // in shared memory before the wait on the tile in flight (the table's latency overlaps it), once
  // per row, and K and V share it (the launcher checks that they share the block table, page size
  // and left padding). (Pages and the left padding are clamped into the cache, as RowsView does:
  // see rows.h.)
  const int first_position = kv_paged ? int(p.k.first_position(b)) : 0;
  const auto stage_tile_pages = [&](int tile) {
    const int key0 = tile * kBlockN, page_size = int(p.k.page_size);
    const int32_t* table = p.k.block_table + b * p.k.block_table_stride;
    for (int r = threadIdx.x; r < kBlockN; r += Config::kThreads) {
      const int position = first_position + key0 + r, index = position / page_size;
      smem_rows[(tile & 1) * kBlockN + r] =
          key0 + r < sk ? PagedRow{entry_below(table[index], p.k.extent), position - index * page_size} : PagedRow{0, 0};
    }
  };
  const auto load_staged_kv = [&](int tile, int stage) {
    const int key0 = tile * kBlockN;
    copy_staged_paged_kv_async<Config, kBlockN, kSwizzleKV>(p.k, p.v, hk, smem_rows + (tile & 1) * kBlockN, sk - key0, int(p.head_dim),
                                                 int(p.head_dim_v), smem_k + stage * Config::kSmemKV,
                                                 smem_v + stage * Config::kSmemKV);
  };

  if (tile_begin < tile_end) {
    if constexpr (kPackGqa)
      load_packed_query_tile_async<Config, kBlockM>(p.q, b, head0, row0, rows_here, int(p.head_dim), pack.group, smem_q);
    else
      load_tile_async<Config, kBlockM>(p.q, b, h, row0, rows_here, int(p.head_dim), smem_q);
    if (stage_pages) {
      stage_tile_pages(tile_begin);
      __syncthreads();
      load_staged_kv(tile_begin, 0);
    } else {
      load_k(tile_begin, 0);
      load_v(tile_begin, 0);
    }
    sm80::cp_async_commit();
  }

  uint32_t q_frag[Config::kQInRegs ? Config::kHeadDim / 16 : 1][kMTiles][4];
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int stage = (tile - tile_begin) & 1;
    // One barrier per tile: it publishes this tile's copies and tells that every warp is done
    // with the previous tile, whose stage then takes the prefetch of the next one. (Prefetching
    // before the wait needs a second barrier per tile, at its end, to free the stage; both
    // versions overlap the next tile's loads with this tile's math.)
    // (Rows of tile + 1 go to the half of smem_rows that tile - 1 used: every thread issued
    // tile's copies, which read the other half, before the barrier below.)
    if (stage_pages && tile + 1 < tile_end) stage_tile_pages(tile + 1);
    sm80::cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < tile_end) {
      if (stage_pages) {
        load_staged_kv(tile + 1, stage ^ 1);
      } else {
        load_k(tile + 1, stage ^ 1);
        load_v(tile + 1, stage ^ 1);
      }
      sm80::cp_async_commit();
    }

    if (warp_without_rows) continue;
    const Element* k_tile = smem_k + stage * Config::kSmemKV;
    const Element* v_tile = smem_v + stage * Config::kSmemKV;
    const int key0 = tile * kBlockN + warp_key0;  // this warp's first key

    if constexpr (Config::kQInRegs) {
      if (tile == tile_begin) {  // Q landed with the first K/V tile
#pragma unroll
        for (int kstep = 0; kstep < Config::kHeadDim / 16; ++kstep)
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            const int a_row = warp_q_row + m * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
            const int a_col = kstep * 16 + (lane / 16) * 8;
            sm80::ldmatrix_x4(q_frag[kstep][m], sm80::smem_address(smem_q + a_row * kRowStride + a_col));
          }
      }
    }
    // S = Q K^T for this warp's rows; each K fragment serves all kMTiles m16 tiles.
    float s[kMTiles][kNTilesS][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int t = 0; t < kNTilesS; ++t) s[m][t][0] = s[m][t][1] = s[m][t][2] = s[m][t][3] = 0.f;
#pragma unroll
    for (int kstep = 0; kstep < Config::kHeadDim / 16; ++kstep) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        if constexpr (Config::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[m][i] = q_frag[kstep][m][i];
        } else {
          const int a_row = warp_q_row + m * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
          const int a_col = kstep * 16 + (lane / 16) * 8;
          sm80::ldmatrix_x4(a[m], sm80::smem_address(smem_q + a_row * kRowStride + a_col));
        }
      }
#pragma unroll
      for (int t = 0; t < kNTilesS; t += 2) {
        uint32_t bk[4];  // b0,b1 of key tiles t and t + 1
        const int b_row = warp_key0 + t * 8 + (lane % 8) + (lane / 16) * 8;
        const int b_col = kstep * 16 + ((lane / 8) % 2) * 8;
        sm80::ldmatrix_x4(bk, sm80::smem_address(k_tile + KVRows::offset(b_row, b_col)));
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          sm80::mma_m16n8k16<Element>(s[m][t], a[m], bk[0], bk[1]);
          sm80::mma_m16n8k16<Element>(s[m][t + 1], a[m], bk[2], bk[3]);
        }
      }
    }

    // Logits. Plain path: nothing here (the scale is folded into the exponent below). General
    // path: each feature is one uniform branch around a branch-free loop.
    if constexpr (Config::kGeneralScore) {
      if (softcap) {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
#pragma unroll
          for (int t = 0; t < kNTilesS; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[m][t][e] = score_to_logit(score, s[m][t][e]);
      } else {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
#pragma unroll
          for (int t = 0; t < kNTilesS; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[m][t][e] *= score.scale;
      }
      if (kPackGqa ? p.alibi_slopes != nullptr : slope != 0.f) {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
#pragma unroll
          for (int t = 0; t < kNTilesS; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if constexpr (kPackGqa) {
                const int dist = row_diag[2 * m + e / 2] - (key0 + t * 8 + quad * 2 + (e % 2));
                s[m][t][e] -= row_slope[2 * m + e / 2] * float(abs(dist));
              } else {
                const int dist = diag0 + m * 16 + (e / 2) * 8 - (key0 + t * 8 + quad * 2 + (e % 2));
                s[m][t][e] -= slope * float(abs(dist));
              }
            }
      }
    }
    // The mask runs only on tiles that cross a row's visible range (a warp-uniform test).
    if (key0 < unmasked_lo || key0 + Config::kWarpKeys > unmasked_hi) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int diag = diag_of(r);
        const int key_lo = p.mask.window_left >= 0 ? max(0, diag - p.mask.window_left) : 0;
        const int key_hi = p.mask.window_right >= 0 ? min(sk, diag + p.mask.window_right + 1) : sk;
#pragma unroll
        for (int t = 0; t < kNTilesS; ++t)
#pragma unroll
          for (int e = 2 * (r % 2); e < 2 * (r % 2) + 2; ++e) {
            const int key = key0 + t * 8 + quad * 2 + (e % 2);
            if (key < key_lo || key >= key_hi) s[r / 2][t][e] = -INFINITY;
          }
      }
    }

    // Online softmax; a quad shares each row. A row's running max moves only when its tile max
    // passes it by more than kRescaleSlack (log2 units; FA4's lazy rescale): P then stays below
    // 2^kRescaleSlack, which fp16/bf16 and the float sums hold as precisely as values below 1, and
    // O and the sum keep sharing one factor, so the result is the same while the O rescale (one
    // FMUL per accumulator, as many as the tile's MMAs at kBlockN 32) becomes rare: one
    // warp-uniform branch per tile.
    float tile_max[kRows];
    bool grow = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int m = r / 2, e0 = 2 * (r % 2);
      float mx = -INFINITY;
#pragma unroll
      for (int t = 0; t < kNTilesS; ++t) mx = sm80::max_nan(mx, sm80::max_nan(s[m][t][e0], s[m][t][e0 + 1]));
      mx = sm80::max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = sm80::max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      tile_max[r] = mx * exp_scale;  // -inf for a row with nothing visible in this tile
      grow |= moves_row_max(tile_max[r], row_max[r], kRescaleSlack);
    }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int m = r / 2, e0 = 2 * (r % 2);
        const bool moves = moves_row_max(tile_max[r], row_max[r], kRescaleSlack);
        // From -inf (nothing seen yet) the factor is 0, applied to a zero O and sum.
        const float rescale = moves ? sm80::fast_exp2(row_max[r] - tile_max[r]) : 1.f;
        row_max[r] = moves ? tile_max[r] : row_max[r];
        row_sum[r] *= rescale;
#pragma unroll
        for (int t = 0; t < kNTilesO; ++t) {
          o[m][t][e0] *= rescale;
          o[m][t][e0 + 1] *= rescale;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int m = r / 2, e0 = 2 * (r % 2);
      // A row with nothing visible yet keeps max -inf; use 0 in the exponent to avoid inf - inf.
      const float max_used = row_max[r] == -INFINITY ? 0.f : row_max[r];
#pragma unroll
      for (int t = 0; t < kNTilesS; ++t)
#pragma unroll
        for (int e = e0; e < e0 + 2; ++e) {
          const float pe = sm80::fast_exp2(fmaf(s[m][t][e], exp_scale, -max_used));
          row_sum[r] += pe;
          s[m][t][e] = pe;
        }
    }

    if constexpr (Config::kDropout) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int t = 0; t < kNTilesS; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = warp_row0 + m * 16 + group + half * 8;
            const int key = key0 + t * 8 + quad * 2;  // even: both keys share one Philox draw
            const Philox4 bits = dropout_bits(p.dropout_seed, p.dropout_offset, b, p.heads_q, h, row, key);
            const int w = key & 3;
            float* pe = &s[m][t][2 * half];
            pe[0] = philox_word(bits, w) >= dropout_threshold_bits ? pe[0] * keep_scale : 0.f;
            pe[1] = philox_word(bits, w + 1) >= dropout_threshold_bits ? pe[1] * keep_scale : 0.f;
          }
    }

    // P as the A operand of O += P V: the S accumulators of key tiles 2k, 2k+1 form k-step k.
    // Packed before the GEMM so the float scores are dead while it runs.
    uint32_t pa[kMTiles][Config::kWarpKeys / 16][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int kstep = 0; kstep < Config::kWarpKeys / 16; ++kstep) {
        pa[m][kstep][0] = sm80::pack2<Element>(s[m][2 * kstep][0], s[m][2 * kstep][1]);
        pa[m][kstep][1] = sm80::pack2<Element>(s[m][2 * kstep][2], s[m][2 * kstep][3]);
        pa[m][kstep][2] = sm80::pack2<Element>(s[m][2 * kstep + 1][0], s[m][2 * kstep + 1][1]);
        pa[m][kstep][3] = sm80::pack2<Element>(s[m][2 * kstep + 1][2], s[m][2 * kstep + 1][3]);
      }
#pragma unroll
    for (int kstep = 0; kstep < Config::kWarpKeys / 16; ++kstep) {
#pragma unroll
      for (int t = 0; t < kNTilesO; t += 2) {
        uint32_t bv[4];  // b0,b1 of head-dim tiles t and t + 1
        const int v_row = warp_key0 + kstep * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        const int v_col = t * 8 + (lane / 16) * 8;
        sm80::ldmatrix_x4_trans(bv, sm80::smem_address(v_tile + KVRows::offset(v_row, v_col)));
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          sm80::mma_m16n8k16<Element>(o[m][t], pa[m][kstep], bv[0], bv[1]);
          sm80::mma_m16n8k16<Element>(o[m][t + 1], pa[m][kstep], bv[2], bv[3]);
        }
      }
    }
  }

  // The combine after a split call may launch now, its blocks taking the slots this grid leaves
  // (programmatic dependent launch): they wait for this grid's writes before reading them.
  if (split_ws.splits > 1 && !split_ws.in_cluster) sm90::launch_dependent_grids();

  // Epilogue: normalise, write O and the LSE (or this split's float partials); rows that saw no
  // key get 0 and -inf. O goes through this warp's own rows of the Q tile (no other warp reads
  // them, and its last read of them is behind it) so that global memory sees whole 16-byte chunks
  // of consecutive columns instead of 4-byte pieces of eight rows.
  // A lane's staging stores overwrite rows that other lanes of its warp addressed in the last
  // ldmatrix of Q: only __syncwarp orders lanes of a warp in the memory model (racecheck reports
  // the pair otherwise).
  if constexpr (Config::kWarpsSplitKeys)
    if (!merge_key_split_warps<Config>(o, row_max, row_sum, reinterpret_cast<unsigned char*>(smem_k), warp, lane)) return;
  __syncwarp();
  Element* out = static_cast<Element*>(p.out.data);
  Element* const o_stage = smem_q + warp_q_row * kRowStride;
  // (token, query head) of a row: itself and h, or packed the token and head of row t * G + g.
  const auto token_and_head = [&](int row, int* token, int64_t* head) {
    if constexpr (kPackGqa) {
      int g;
      *token = pack.group.divmod(row, &g);
      *head = head0 + g;
    } else {
      *token = row;
      *head = h;
    }
  };
  if constexpr (Config::kWarpsSplitKeys) {
    if (split_ws.in_cluster) {
      // The splits meet in the cluster's shared memory (cluster_combine.cuh), past the merge's space.
      static_assert(Config::kClusterPartialOffset + sizeof(ClusterPartial<Config::kHeadDim>) <=
                        size_t(2 * Config::kStages * Config::kSmemKV) * sizeof(Element),
                    "cluster partial space");
      merge_cluster_splits<Config>(o, row_max, row_sum, reinterpret_cast<unsigned char*>(smem_k) + Config::kClusterPartialOffset,
                                   split_ws.splits, rows_here, lane, [&](int row_local, int col, float4 v, float lse) {
                                     int token;
                                     int64_t head;
                                     token_and_head(row0 + row_local, &token, &head);
                                     if (col < p.head_dim_v) {
                                       uint2 packed;
                                       packed.x = sm80::pack2<Element>(v.x, v.y);
                                       packed.y = sm80::pack2<Element>(v.z, v.w);
                                       *reinterpret_cast<uint2*>(out + p.out.offset(b, token, head) + col) = packed;
                                     }
                                     if (col == 0 && p.lse.defined()) p.lse.data[p.lse.offset(b, token, head)] = lse;
                                   });
      return;
    }
  }
  const bool to_partials = split_ws.splits > 1;
  const int64_t packed_base = packed_row_base(p, b);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int m = r / 2, e0 = 2 * (r % 2);
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const bool empty = row_max[r] == -INFINITY || sum == 0.f;
    const float inv = empty ? 0.f : 1.f / sum;
    const float lse = empty ? -INFINITY : (row_max[r] + log2f(sum)) * kLn2;
    const int row_local = m * 16 + group + (r % 2) * 8;  // within this warp's rows
    const int row = warp_row0 + row_local;
    int token;
    int64_t head;
    token_and_head(row, &token, &head);
    if (to_partials) {
      if (row >= sq) continue;
      float* part = split_ws.out_partial + split_ws.out_offset(p, split, packed_base + token, head);
#pragma unroll
      for (int t = 0; t < kNTilesO; ++t) {
        const int col = t * 8 + quad * 2;
        if (col < p.head_dim_v) *reinterpret_cast<float2*>(part + col) = make_float2(o[m][t][e0] * inv, o[m][t][e0 + 1] * inv);
      }
      if (quad == 0) split_ws.lse_partial[split_ws.lse_offset(p, split, packed_base + token, head)] = lse;
      continue;
    }
#pragma unroll
    for (int t = 0; t < kNTilesO; ++t)
      *reinterpret_cast<uint32_t*>(o_stage + row_local * kRowStride + t * 8 + quad * 2) =
          sm80::pack2<Element>(o[m][t][e0] * inv, o[m][t][e0 + 1] * inv);
    if (row < sq && quad == 0 && p.lse.defined()) p.lse.data[p.lse.offset(b, token, head)] = lse;
  }
  if (!to_partials) {
    __syncwarp();
    // Rows of out are equally spaced (dense or varlen) and 16-byte aligned, head_dim_v a multiple
    // of 8 (the validation's rules), so every chunk is whole.
    Element* const out_rows = out + p.out.offset(b, 0, head0);
    constexpr int kChunks = Config::kHeadDim / 8, kWarpChunks = 16 * kMTiles * kChunks;
    static_assert(kWarpChunks % 32 == 0, "whole chunk rounds per warp");
#pragma unroll
    for (int i = 0; i < kWarpChunks / 32; ++i) {
      const int chunk = i * 32 + lane, row_local = chunk / kChunks, col = chunk % kChunks * 8;
      const int row = warp_row0 + row_local;
      if (row < sq && col < p.head_dim_v) {
        Element* dst = out_rows + row * p.out.row_stride + col;
        if constexpr (kPackGqa) {
          int g;
          const int token = pack.group.divmod(row, &g);
          dst = out_rows + token * p.out.row_stride + g * p.out.head_stride + col;
        }
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(o_stage + row_local * kRowStride + col);
      }
    }
  }
}

}  // namespace flashattn::fa2
