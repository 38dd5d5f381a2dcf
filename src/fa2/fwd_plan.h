// How the FA2 forward runs a call: the kernel (tiles, score path) and the split-KV count for
// num_splits = 0. fwd_plan picks the kernel; tests and benchmarks may pass their own plan to
// fa2::fwd (fa2_backend.h), which check_fwd_plan validates. Host code only, free of CUDA, so the
// rules are unit-tested on the CPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/pack_gqa.h"
#include "common/problem.h"
#include "fa2/device_limits.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// One FA2 forward kernel: FwdConfig<Element, head_dim, block_m, block_n, warps, dropout,
// general_score, q_in_registers> (fwd_kernel.cuh). Each warp holds block_m / warps query rows.
struct FwdKernelShape {
  int head_dim;  // the kernel's (q/k and v): 32, 64, .., 256; smaller head dims run padded
  int block_m;   // query rows per CTA
  int block_n;   // keys per K/V tile
  int warps;
  bool dropout;        // Philox dropout (a template flag: its state costs registers)
  bool general_score;  // softcap, ALiBi or scale <= 0 (dropout kernels take this path too)
  bool q_in_registers;  // Q's fragments stay in registers across the key loop
};

// The kernels built, per element type (fwd_launch.cu instantiates exactly these). Plain scores:
// the base tiles per head dim, the decode tiles (16 x 64 at d64 and d128: a few query rows, the
// warps splitting each tile's keys; 64 x 64 at d256, the warps without rows idle) and d256 on
// 128 x 64 with 8 warps (198 KB). Dropout takes
// the general path only, with smaller tiles where the Philox state would otherwise spill. The plain
// d64 kernel keeps Q's fragments in registers (two CTAs per SM either way; at d96 and up, and with
// softcap/ALiBi or dropout, they would spill; at d32 they would cost the third CTA).
inline constexpr FwdKernelShape kFwdKernels[] = {
    // plain
    {32, 128, 64, 4, false, false, false},
    {64, 128, 64, 4, false, false, true},
    {96, 128, 32, 4, false, false, false},
    {128, 128, 32, 4, false, false, false},
    {160, 64, 32, 4, false, false, false},
    {192, 64, 32, 4, false, false, false},
    {224, 64, 32, 4, false, false, false},
    {256, 64, 32, 4, false, false, false},
    {64, 16, 64, 4, false, false, false},   // decode, warps split the keys
    {128, 16, 64, 4, false, false, false},  // decode, warps split the keys
    {256, 64, 64, 4, false, false, false},  // decode
    {256, 128, 64, 8, false, false, false},  // wide d256
    // softcap / ALiBi, no dropout
    {32, 128, 64, 4, false, true, false},
    {64, 128, 64, 4, false, true, false},
    {96, 128, 32, 4, false, true, false},
    {128, 128, 32, 4, false, true, false},
    {160, 64, 32, 4, false, true, false},
    {192, 64, 32, 4, false, true, false},
    {224, 64, 32, 4, false, true, false},
    {256, 64, 32, 4, false, true, false},
    // dropout
    {32, 128, 32, 4, true, true, false},
    {64, 128, 32, 4, true, true, false},
    {96, 64, 32, 4, true, true, false},
    {128, 64, 32, 4, true, true, false},
    {160, 64, 32, 4, true, true, false},
    {192, 64, 32, 4, true, true, false},
    {224, 64, 32, 4, true, true, false},
    {256, 64, 32, 4, true, true, false},
};

// The kernels built with query heads packed into rows (FwdPlan::pack_gqa_queries): 64 x 64 tiles
// (up to 64 packed rows) and d256's base tiles (sm80 and sm86 have no room for its 64 x 64) for plain scores,
// the base tiles of d64, d128 and d256 for softcap / ALiBi; other head dims run padded to these.
// fwd_launch_packed.cu instantiates exactly these, FwdConfig's kPackGqa set.
inline constexpr FwdKernelShape kFwdPackedQueryKernels[] = {
    {64, 64, 64, 4, false, false, false},
    {128, 64, 64, 4, false, false, false},
    {256, 64, 64, 4, false, false, false},
    {256, 64, 32, 4, false, false, false},
    {64, 128, 64, 4, false, true, false},
    {128, 128, 32, 4, false, true, false},
    {256, 64, 32, 4, false, true, false},
};

// The kernel of one call, and whether a paged call stages each tile's pages in shared memory.
struct FwdPlan {
  int head_dim = 0;
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  bool dropout = false;
  bool general_score = false;
  // Paged K/V: the pages of the next two tiles go to shared memory before the wait on the tile in
  // flight, where the GPU has the bytes (else each thread reads the block table itself).
  bool stage_pages = false;
  // The G = heads_q / heads_k query heads of a KV head packed into the rows of its tiles for any
  // seqlen_q (common/pack_gqa.h, can_pack_gqa_queries), on the kernels of kFwdPackedQueryKernels;
  // fwd_plan takes it where pack_gqa_queries_pays with plain scores.
  bool pack_gqa_queries = false;
  // Split-KV calls on the key-split decode tiles (sm90): the splits of a row block run as one
  // thread-block cluster of at most kMaxClusterSplits CTAs and merge in its shared memory
  // (fa2/cluster_combine.cuh) instead of through float partials and a combine kernel. A forced
  // count of 2..kMaxClusterSplits runs so; with num_splits = 0 only a count the split rule puts
  // above kMaxClusterSplits, then capped at it (where the cap cuts the count it measured faster;
  // at an unchanged count, slower: docs/PERF.md). Where the device cannot hold such a cluster,
  // the call splits as without it. fwd_plan takes it on sm90 for caches without pages.
  bool split_in_cluster = false;
  // With split_in_cluster, on a grid of at most one CTA per SM: one CTA per SM (fwd_launch.cuh).
  bool cluster_one_per_sm = true;
  friend bool operator==(const FwdPlan&, const FwdPlan&) = default;
};

inline constexpr int kMaxClusterSplits = 16;  // the largest (non-portable) cluster on sm90

constexpr bool same_kernel(const FwdKernelShape& k, const FwdPlan& plan) {
  return k.head_dim == plan.head_dim && k.block_m == plan.block_m && k.block_n == plan.block_n &&
         k.warps == plan.warps && k.dropout == plan.dropout && k.general_score == plan.general_score;
}

// Shared memory of a kernel: Q and two stages of K and V, rows padded by 16 bytes (fp16/bf16) but
// the K/V rows of the key-split decode tiles (16 rows, swizzled instead); staged pages add where
// two tiles' rows lie, 8 bytes a row. (fwd_launch.cu checks both against FwdConfig.)
constexpr int fwd_smem_bytes(const FwdPlan& plan) {
  const int kv_row = plan.block_m == 16 && plan.warps > 1 ? plan.head_dim : plan.head_dim + 8;
  return 2 * plan.block_m * (plan.head_dim + 8) + 2 * 4 * plan.block_n * kv_row;
}
constexpr int fwd_pages_smem_bytes(const FwdPlan& plan) { return 2 * plan.block_n * 8; }

// The query rows per (sequence, head) the kernel sees: decoding with GQA packs the query heads
// of a KV head into rows (fwd_launch.cu, common/pack_gqa.h).
inline int64_t fwd_kernel_rows(const AttnProblem& call) {
  return can_pack_gqa_rows(call) ? call.heads_q / call.heads_k : call.lens.seqlen_q;
}

inline int64_t fwd_call_head_dim(const AttnProblem& call) { return std::max(call.head_dim, call.head_dim_v); }

// The base tiles by head dim and score path: what sm80 runs outside decoding. Head dims 32, 64, ..,
// 256 have kernels of their own; others run padded to the next.
inline FwdPlan fwd_base_plan(const AttnProblem& call, const DeviceLimits& limits) {
  const int64_t dim = fwd_call_head_dim(call);
  FwdPlan plan;
  plan.dropout = call.dropout_p > 0.f;
  plan.general_score = plan.dropout || !call.plain_forward_scores();
  plan.head_dim = dim <= 32 ? 32 : dim <= 64 ? 64 : dim <= 96 ? 96 : dim <= 128 ? 128 : dim <= 160 ? 160
                : dim <= 192 ? 192 : dim <= 224 ? 224 : 256;
  plan.warps = 4;
  if (plan.head_dim <= 64) {
    plan.block_m = 128;
    plan.block_n = plan.dropout ? 32 : 64;
  } else if (plan.head_dim <= 128) {
    plan.block_m = plan.dropout ? 64 : 128;
    plan.block_n = 32;
  } else {
    plan.block_m = 64;
    plan.block_n = 32;
  }
  plan.stage_pages = call.k.block_table != nullptr && fwd_smem_bytes(plan) + fwd_pages_smem_bytes(plan) <= limits.smem_optin;
  return plan;
}

// The plan of a call without packed query heads (fwd_plan packs them where that pays), on a
// device with these limits. Plain scores also take:
// - decoding (at most 16 query rows per head after pack-GQA): the decode tiles, 16 x 64 with the
//   warps splitting the keys at d64 and d128 (d32 runs the d64 one, d96 the d128 one; on sm90
//   without pages, long caches split in clusters: FwdPlan::split_in_cluster), 64 x 64 at
//   d256, whose 165 KB are more than sm80's and sm86's opt-in, where the base tiles take the call;
// - d256 at 128 x 64 with 8 warps where the GPU has the 198 KB (sm90; faster than 64 x 32 there,
//   docs/PERF.md): half the key tiles per row block, twice the keys per barrier.
inline FwdPlan fwd_plan_rows(const AttnProblem& call, const DeviceLimits& limits) {
  const FwdPlan base = fwd_base_plan(call, limits);
  if (base.general_score) return base;
  const int64_t dim = fwd_call_head_dim(call);
  const auto with_tiles = [&](int head_dim, int block_m, int block_n, int warps) {
    FwdPlan plan = base;
    plan.head_dim = head_dim;
    plan.block_m = block_m;
    plan.block_n = block_n;
    plan.warps = warps;
    plan.stage_pages = call.k.block_table != nullptr && fwd_smem_bytes(plan) + fwd_pages_smem_bytes(plan) <= limits.smem_optin;
    return plan;
  };
  if (fwd_kernel_rows(call) <= 16) {
    if (dim <= 128) {
      FwdPlan decode = with_tiles(dim <= 64 ? 64 : 128, 16, 64, 4);
      // sm90 caches without pages: the splits of a long cache merge in clusters (measured faster
      // where the cap cuts the count; paged caches measured slower, docs/PERF.md).
      decode.split_in_cluster = limits.arch >= 90 && call.k.block_table == nullptr;
      return decode;
    }
    const FwdPlan decode = with_tiles(256, 64, 64, 4);
    if (fwd_smem_bytes(decode) <= limits.smem_optin) return decode;
  }
  if (dim > 224) {
    const FwdPlan wide = with_tiles(256, 128, 64, 8);
    if (fwd_smem_bytes(wide) <= limits.smem_optin) return wide;
  }
  return base;
}

// Ok when `plan` can run the call on the device: one of kFwdKernels, the call's score path, a head
// dim that holds the call's, the shared memory there; else the error fa2::fwd answers.
inline Status check_fwd_plan(const FwdPlan& plan, const AttnProblem& call, const DeviceLimits& limits) {
  const auto refuse = [](const std::string& why) {
    return Status::error(ErrorCode::InvalidArgument, "plan", "argument 'plan': fa2 fwd: the forced plan " + why);
  };
  const bool dropout = call.dropout_p > 0.f;
  if (plan.dropout != dropout || plan.general_score != (dropout || !call.plain_forward_scores()))
    return refuse("takes another score path than the call (dropout, softcap, ALiBi or scale <= 0)");
  if (plan.head_dim < fwd_call_head_dim(call))
    return refuse("has head dim " + std::to_string(plan.head_dim) + ", the call needs " +
                  std::to_string(fwd_call_head_dim(call)));
  const auto named = [&](const FwdKernelShape& k) { return same_kernel(k, plan); };
  if (plan.pack_gqa_queries && !can_pack_gqa_queries(call))
    return refuse("packs query heads into rows of a call that cannot pack them (varlen, paged or indexed queries, "
                  "dropout, or 2^30 rows per KV head; common/pack_gqa.h)");
  if (plan.pack_gqa_queries
          ? std::none_of(std::begin(kFwdPackedQueryKernels), std::end(kFwdPackedQueryKernels), named)
          : std::none_of(std::begin(kFwdKernels), std::end(kFwdKernels), named))
    return refuse("names no built kernel (d" + std::to_string(plan.head_dim) + ", " + std::to_string(plan.block_m) + " x " +
                  std::to_string(plan.block_n) + ", " + std::to_string(plan.warps) + " warps" +
                  (plan.pack_gqa_queries ? ", query heads packed into rows" : "") + "; fa2/fwd_plan.h lists them)");
  if (fwd_smem_bytes(plan) > limits.smem_optin)
    return Status::error(ErrorCode::Unsupported, "q",
                         "fa2 fwd: head dim " + std::to_string(call.head_dim) + " needs " + std::to_string(fwd_smem_bytes(plan)) +
                             " bytes of shared memory per block, the GPU has " + std::to_string(limits.smem_optin));
  if (plan.stage_pages && call.k.block_table == nullptr) return refuse("stages pages of a call without a block table");
  if (plan.stage_pages && fwd_smem_bytes(plan) + fwd_pages_smem_bytes(plan) > limits.smem_optin)
    return refuse("stages pages where the GPU lacks the shared memory for them");
  return {};
}

// The tiles of a call whose query heads are packed into rows (can_pack_gqa_queries): plain scores
// on 64 x 64 tiles (d256's where its 165 KB fit, else its base tiles), softcap / ALiBi on the
// base tiles; the call's head dim padded to 64, 128 or 256.
inline FwdPlan fwd_packed_queries_tiles(const AttnProblem& call, const DeviceLimits& limits) {
  const int64_t dim = fwd_call_head_dim(call);
  FwdPlan plan;
  plan.general_score = !call.plain_forward_scores();
  plan.head_dim = dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
  plan.warps = 4;
  plan.block_m = plan.general_score && plan.head_dim < 256 ? 128 : 64;
  plan.block_n = plan.general_score && plan.head_dim == 64 ? 64 : 32;
  if (!plan.general_score) {
    plan.block_n = 64;
    if (plan.head_dim == 256 && fwd_smem_bytes(plan) > limits.smem_optin) plan.block_n = 32;
  }
  plan.pack_gqa_queries = true;
  plan.stage_pages = call.k.block_table != nullptr && fwd_smem_bytes(plan) + fwd_pages_smem_bytes(plan) <= limits.smem_optin;
  return plan;
}

// Where packing query heads pays: GQA (G > 1) with a few query tokens (one query already packs,
// pack_gqa_rows) whose G x seqlen_q rows fill at most one 64-row decode tile, so each KV tile is
// read once per KV head instead of once per query head.
inline bool pack_gqa_queries_pays(const AttnProblem& call) {
  return can_pack_gqa_queries(call) && call.heads_q > call.heads_k && call.lens.seqlen_q > 1 &&
         packed_query_rows(call) <= 64;
}

// The plan fa2::fwd runs a call with (the call as fa2::fwd receives it): fwd_plan_rows's, with
// the query heads of a KV head packed into its tiles' rows where that pays and the scores are
// plain (measured there: about 3x the GB/s at 4 queries, docs/PERF.md; softcap/ALiBi packing
// runs when forced but was not timed).
inline FwdPlan fwd_plan(const AttnProblem& call, const DeviceLimits& limits) {
  return pack_gqa_queries_pays(call) && call.plain_forward_scores() ? fwd_packed_queries_tiles(call, limits)
                                                                     : fwd_plan_rows(call, limits);
}

struct SplitInputs {
  int64_t ctas = 0;          // CTAs without splitting: row blocks x heads x batch
  int64_t longest_keys = 0;  // keys of the longest sequence (an upper bound is fine)
  int64_t tile_keys = 0;     // keys per K/V tile of the kernel
  int multiprocessors = 0;
  int ctas_per_sm = 1;       // resident CTAs per SM (occupancy of the kernel)
  bool memory_bound = false;  // the key-split decode tiles: a call reads each K/V tile once
};

// Whether `splits` parts of `tiles` key tiles take fewer tiles each than splits - 1 parts do
// (split_key_range gives each part ceil(tiles / splits)): otherwise the extra split only adds
// empty CTAs and partials to combine while the longest split stays as long (FlashAttention's
// eligibility rule; 128 tiles in 42 splits left 10 of them empty).
constexpr bool split_shortens_parts(int64_t tiles, int64_t splits) {
  return splits <= 1 || (tiles + splits - 1) / splits < (tiles + splits - 2) / (splits - 1);
}

// Splits for num_splits = 0, FlashAttention's wave rule: among the split counts that shorten the
// parts (split_shortens_parts), the fewest whose last wave is at least 85 % as full as the best
// one's (a wave = multiprocessors x ctas_per_sm CTAs), keeping at least two key tiles per split
// and at most 64 splits. When the CTAs already fill every resident slot: none, except on
// memory-bound decode tiles, whose last, partial wave reads at a fraction of the bandwidth for a
// whole CTA's time: those split into the fewest parts that make four waves, each keeping 32 key
// tiles (docs/PERF.md: 64 x 8k keys 1.22x, 128 x 8k 1.05x).
inline int choose_fwd_splits(const SplitInputs& in) {
  const int64_t slots = int64_t(std::max(1, in.multiprocessors)) * std::max(1, in.ctas_per_sm);
  const int64_t tile_keys = std::max<int64_t>(1, in.tile_keys);
  if (in.ctas <= 0) return 1;
  if (in.ctas >= slots) {
    if (!in.memory_bound) return 1;
    const int64_t for_waves = (4 * slots + in.ctas - 1) / in.ctas;
    const int64_t by_keys = in.longest_keys / (32 * tile_keys);
    return int(std::clamp<int64_t>(std::min(for_waves, by_keys), 1, 64));
  }
  const int64_t by_keys = std::max<int64_t>(1, in.longest_keys / (2 * tile_keys));
  const int max_splits = int(std::min<int64_t>(64, by_keys));
  const auto efficiency = [&](int splits) {
    const double waves = double(in.ctas * splits) / double(slots);
    return waves / std::ceil(waves);
  };
  const int64_t tiles = (in.longest_keys + tile_keys - 1) / tile_keys;
  double best = 0;
  for (int s = 1; s <= max_splits; ++s)
    if (split_shortens_parts(tiles, s)) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_splits; ++s)
    if (split_shortens_parts(tiles, s) && efficiency(s) >= 0.85 * best) return s;
  return 1;
}

}  // namespace flashattn::fa2
