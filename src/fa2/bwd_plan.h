// How the FA2 backward runs a call: the main kernel's tiles and the dQ adds. bwd_plan picks them;
// tests and benchmarks may pass their own plan to fa2::bwd (fa2_backend.h), which check_bwd_plan
// validates. Host code only, free of CUDA, so the rules are unit-tested on the CPU.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>

#include "common/problem.h"
#include "fa2/device_limits.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// One main kernel of the FA2 backward: BwdConfig<Element, head_dim, block_m, block_n, 8 warps,
// stages, dropout, general_score, key_tiles> (bwd_kernel.cuh), with block_n = 128 keys per CTA at
// d64/d128 and 64 at d256 (bwd_block_n).
struct BwdKernelShape {
  int head_dim;   // the kernel's (q/k and v): 64, 128 or 256
  int block_m;    // query rows per step
  int key_tiles;  // m16 key tiles per warp: 2 reads each Q/dO fragment once for both (P^T then
                  //   goes through shared memory); the plain score path only (the general one spills)
  int stages;     // Q/dO stages: 2 prefetches the next step's; 1 where two do not fit (d256)
  bool dropout;
  bool general_score;  // softcap or ALiBi (dropout kernels take this path too)
};

// The kernels built, per element type (bwd_hdim*.cu instantiate exactly these): plain scores with
// two key tiles (d64 also on 128 rows per step: FA2's d64 tile, 190 KB), one key tile where two do
// not fit (d64/d128; at d256 two need no more shared memory than one), one stage at d256 where two
// do not fit; the general path (and dropout) on one key tile.
inline constexpr BwdKernelShape kBwdKernels[] = {
    {64, 128, 2, 2, false, false}, {64, 64, 2, 2, false, false}, {64, 64, 1, 2, false, false},
    {128, 64, 2, 2, false, false}, {128, 64, 1, 2, false, false},
    {256, 64, 2, 2, false, false}, {256, 64, 1, 1, false, false},
    {64, 64, 1, 2, false, true},   {128, 64, 1, 2, false, true},
    {256, 64, 1, 2, false, true},  {256, 64, 1, 1, false, true},
    {64, 64, 1, 2, true, true},    {128, 64, 1, 2, true, true},
    {256, 64, 1, 2, true, true},   {256, 64, 1, 1, true, true},
};

struct BwdPlan {
  int head_dim = 0;
  int block_m = 0;
  int key_tiles = 0;
  int stages = 0;
  bool dropout = false;
  bool general_score = false;
  // sm90, atomic mode, no dropout: each staged 16 x 16 dQ tile is added by one bulk reduction (the
  // TMA unit) instead of vector atomics from every lane.
  bool dq_bulk = false;
  friend bool operator==(const BwdPlan&, const BwdPlan&) = default;
};

constexpr bool same_kernel(const BwdKernelShape& k, const BwdPlan& plan) {
  return k.head_dim == plan.head_dim && k.block_m == plan.block_m && k.key_tiles == plan.key_tiles &&
         k.stages == plan.stages && k.dropout == plan.dropout && k.general_score == plan.general_score;
}

constexpr int bwd_block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }

// Shared memory of a main kernel (fp16/bf16): K and V, the Q and dO stages, dS^T (and P^T when
// warps share keys), LSE and D per stage, and the per-warp dQ staging tiles when P^T is in shared
// memory. (bwd_main.cuh checks it against BwdConfig.)
constexpr int bwd_smem_bytes(const BwdPlan& plan) {
  constexpr int kWarps = 8;
  const int block_n = bwd_block_n(plan.head_dim);
  const int row = plan.head_dim + 8, t_stride = plan.block_m + 8;
  const bool p_in_smem = kWarps / (block_n / (16 * plan.key_tiles)) > 1;
  const int elements = 2 * block_n * row + 2 * plan.stages * plan.block_m * row + (p_in_smem ? 2 : 1) * block_n * t_stride;
  return 2 * elements + 2 * plan.stages * plan.block_m * 4 + (p_in_smem ? kWarps * 16 * 16 * 4 : 0);
}

// The kernel's head dim for a call: 64, 128 or 256.
inline int bwd_head_dim(const AttnProblem& p) {
  const int64_t dim = std::max(p.head_dim, p.head_dim_v);
  return dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
}

// The plan fa2::bwd runs a call with on a device with these limits (the H200 measurements behind
// each choice: docs/PERF.md): plain scores take two key tiles per warp wherever the shared memory
// has them, d64 then 128 rows per step; else one key tile on two stages, at d256 one stage where
// two do not fit. dQ: bulk reductions at d256 on sm90 (at d64/d128 they measured even with the
// atomics), vector atomics elsewhere.
inline BwdPlan bwd_plan(const BwdProblem& problem, const DeviceLimits& limits) {
  const AttnProblem& p = problem.fwd;
  BwdPlan plan;
  plan.head_dim = bwd_head_dim(p);
  plan.dropout = p.dropout_p > 0.f;
  plan.general_score = plan.dropout || p.score_modifiers();
  plan.dq_bulk = limits.arch >= 90 && plan.head_dim == 256 && !plan.dropout && !problem.deterministic;
  struct Tiles {
    int block_m, key_tiles, stages;
  };
  const Tiles candidates[] = {{128, 2, 2}, {64, 2, 2}, {64, 1, 2}, {64, 1, 1}};
  BwdPlan fallback = plan;  // nothing fits: the two-stage kernel with the least shared memory, for the error
  bool have_fallback = false;
  for (const Tiles& t : candidates) {
    BwdPlan c = plan;
    c.block_m = t.block_m;
    c.key_tiles = t.key_tiles;
    c.stages = t.stages;
    if (std::none_of(std::begin(kBwdKernels), std::end(kBwdKernels), [&](const BwdKernelShape& k) { return same_kernel(k, c); }))
      continue;
    if (bwd_smem_bytes(c) <= limits.smem_optin) return c;
    if (c.stages == 2 && (!have_fallback || bwd_smem_bytes(c) < bwd_smem_bytes(fallback))) {
      fallback = c;
      have_fallback = true;
    }
  }
  return fallback;
}

// Ok when `plan` can run the call on the device: one of kBwdKernels, the call's head dim and score
// path, the shared memory there, bulk dQ adds only where they run; else the error fa2::bwd answers.
inline Status check_bwd_plan(const BwdPlan& plan, const BwdProblem& problem, const DeviceLimits& limits) {
  const AttnProblem& p = problem.fwd;
  const auto refuse = [](const std::string& why) {
    return Status::error(ErrorCode::InvalidArgument, "plan", "argument 'plan': fa2 bwd: the forced plan " + why);
  };
  const bool dropout = p.dropout_p > 0.f;
  if (plan.dropout != dropout || plan.general_score != (dropout || p.score_modifiers()))
    return refuse("takes another score path than the call (dropout, softcap or ALiBi)");
  if (plan.head_dim != bwd_head_dim(p))
    return refuse("has head dim " + std::to_string(plan.head_dim) + ", the call runs at " + std::to_string(bwd_head_dim(p)));
  if (std::none_of(std::begin(kBwdKernels), std::end(kBwdKernels), [&](const BwdKernelShape& k) { return same_kernel(k, plan); }))
    return refuse("names no built kernel (d" + std::to_string(plan.head_dim) + ", " + std::to_string(plan.block_m) +
                  " rows per step, " + std::to_string(plan.key_tiles) + " key tiles per warp, " + std::to_string(plan.stages) +
                  " stages; fa2/bwd_plan.h lists them)");
  if (bwd_smem_bytes(plan) > limits.smem_optin)
    return Status::error(ErrorCode::Unsupported, "q",
                         "fa2 bwd: head dim " + std::to_string(p.head_dim) + " needs more shared memory per block (" +
                             std::to_string(bwd_smem_bytes(plan)) + " bytes) than the GPU has (" +
                             std::to_string(limits.smem_optin) + ")");
  if (plan.dq_bulk && (limits.arch < 90 || plan.dropout || problem.deterministic))
    return refuse("adds dQ by bulk reductions, which run on sm90 in the atomic mode without dropout only");
  return {};
}

}  // namespace flashattn::fa2
