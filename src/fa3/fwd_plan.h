// How the FA3 forward runs a call: tiles, ping-pong, the epilogue's stores, the dynamic schedule's
// sections. fwd_plan picks them; tests and benchmarks may pass their own plan to fa3::fwd
// (fa3_backend.h), which check_fwd_plan validates. Host code only, free of CUDA, so the rules are
// unit-tested on the CPU. The measurements behind each rule: docs/PERF.md (H200).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "common/problem.h"
#include "fa3/head_dim.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// One FA3 forward kernel: FwdConfig<Element, head_dim, head_dim_v, block_n, 2 stages,
// general_score, pingpong, consumers> (fwd_config.h), 64 * consumers query rows per tile.
struct FwdKernelShape {
  int head_dim, head_dim_v;  // the kernel's: multiples of 64
  int block_n;               // keys per K/V tile
  int consumers;             // consumer warpgroups: 2, or 3 at d64
  bool general_score;        // softcap, ALiBi or scale <= 0: two consumers, no ping-pong
  bool pingpong;             // the consumer warpgroups take turns issuing their wgmmas
};

// The kernels built, per element type (fwd_hdim*.cu instantiate exactly these). Ping-pong at d64
// (off measured 1-3 % slower), d192 and on the 144-key d128 tile (off 1 % slower); the other d128
// tiles and d256 have only kernels without it, measured 1-3 % faster (docs/PERF.md). The general
// score path takes narrower key tiles at d192/d256 (more live values per element).
inline constexpr FwdKernelShape kFwdKernels[] = {
    {64, 64, 128, 2, true, false},     {64, 64, 128, 2, false, true},     {64, 64, 128, 3, false, true},
    {128, 128, 128, 2, true, false},   {128, 128, 128, 2, false, false},  {128, 128, 144, 2, false, true},
    {128, 128, 176, 2, false, false},
    {192, 128, 128, 2, true, false},   {192, 128, 128, 2, false, true},   {192, 128, 128, 2, false, false},
    {192, 192, 96, 2, true, false},    {192, 192, 112, 2, false, true},   {192, 192, 112, 2, false, false},
    {256, 256, 64, 2, true, false},    {256, 256, 80, 2, false, false},
};

struct FwdPlan {
  int head_dim = 0, head_dim_v = 0;  // the kernel's
  int block_n = 0;
  int consumers = 2;
  bool general_score = false;
  bool pingpong = false;
  // The epilogue's O through shared memory and TMA stores (dense calls; where the TMA cannot
  // address out, fwd_launch.cu falls back to stores from registers), else stores from registers.
  bool tma_store_o = false;
  // Calls with unequal tiles (causal, windowed, varlen, seqused_k) run persistent CTAs that take
  // their tiles from a counter, in sections of (sequence, head) pairs whose K and V fit in this
  // many megabytes (fwd_scheduler.cuh); 0 = one head per section.
  int section_mb = 16;
  friend bool operator==(const FwdPlan&, const FwdPlan&) = default;
};

constexpr bool same_kernel(const FwdKernelShape& k, const FwdPlan& plan) {
  return k.head_dim == plan.head_dim && k.head_dim_v == plan.head_dim_v && k.block_n == plan.block_n &&
         k.consumers == plan.consumers && k.general_score == plan.general_score && k.pingpong == plan.pingpong;
}

// Whether a tile of block_m x block_n pads a seqlen_q x seqlen_k problem by at most `slack` (a
// fraction) more than the base_m x base_n tile does: wider tiles are faster per key, but their
// padding of the last row block and key tile wastes work on short sequences.
inline bool pads_at_most(int64_t seqlen_q, int64_t seqlen_k, int block_m, int block_n, int base_m, int base_n, double slack) {
  auto padded = [](int64_t x, int block) { return double((x + block - 1) / block * block); };
  return padded(seqlen_q, block_m) * padded(seqlen_k, block_n) <= (1.0 + slack) * padded(seqlen_q, base_m) * padded(seqlen_k, base_n);
}

// Whether the call's out can take TMA stores: dense (a box past a varlen sequence's end would
// write the next sequence's rows).
inline bool out_is_dense(const AttnProblem& p) {
  return p.lens.cu_seqlens_q == nullptr && p.out.cu_seqlens == nullptr && p.out.block_table == nullptr &&
         p.out.batch_index == nullptr;
}

// Whether plain-score calls on a tile of this head dim and key width take ping-pong: at d64 (no
// kernel without it), d192 and on the 144-key d128 tile; on the other d128 tiles and at d256 the
// consumers issue their GEMMs without taking turns (1-3 % faster at d128, 1 % at d256; 1 % slower
// on the 144-key tile: docs/PERF.md). Tests that force a key width take its ping-pong from here.
constexpr bool fwd_pingpong(int head_dim, int block_n) { return head_dim == 64 || head_dim == 192 || block_n == 144; }

// The plan fa3::fwd runs a call with (a call fa3::check covers). Plain scores:
// - d64: three consumer warpgroups (192-row tiles, as FA3 runs) unless that pads the problem 7 %
//   more than 128 x 128 does, then two; 128 keys (FA3's unmasked 192-key tile with P through
//   shared memory, and 128 x 192 on two consumers, measured slower at every length and were
//   deleted: docs/PERF.md);
// - d128: 176 keys (FA3's tile) from 1k keys when it pads the keys at most 4 % more than 128 does,
//   else 144 when that pads at most 2 % more, else 128; causal or windowed calls take 128, as FA3
//   does (a narrower tile wastes less on the diagonal);
// - d192: 112 keys (head_dim_v 192; O, S and P fill the registers), 128 with head_dim_v <= 128;
//   d256: 80 keys (Q and two K/V stages fill the shared memory);
// - ping-pong as fwd_pingpong says.
// General scores: two consumers without ping-pong, 128 keys (d192: 96, d256: 64). Every call:
// TMA stores of O from a value head dim of 128 on dense calls; sections of 16 MB.
inline FwdPlan fwd_plan(const AttnProblem& p) {
  FwdPlan plan;
  plan.head_dim = kernel_head_dim(p.head_dim);
  plan.head_dim_v = kernel_head_dim(p.head_dim_v);
  plan.general_score = !p.plain_forward_scores();
  plan.tma_store_o = plan.head_dim_v >= 128 && out_is_dense(p);
  const bool masked = p.mask.limits_keys();
  const int64_t sk = p.lens.seqlen_k;
  if (plan.general_score) {
    plan.block_n = plan.head_dim_v == 256 ? 64 : plan.head_dim_v == 192 ? 96 : 128;
    return plan;
  }
  switch (plan.head_dim) {
    case 64:
      plan.consumers = pads_at_most(p.lens.seqlen_q, sk, 192, 128, 128, 128, 0.07) ? 3 : 2;
      plan.block_n = 128;
      break;
    case 128:
      plan.block_n = masked                                                   ? 128
                     : sk >= 1024 && pads_at_most(1, sk, 1, 176, 1, 128, 0.04) ? 176
                     : pads_at_most(1, sk, 1, 144, 1, 128, 0.02)              ? 144
                                                                               : 128;
      break;
    case 192: plan.block_n = plan.head_dim_v == 192 ? 112 : 128; break;
    default: plan.block_n = 80; break;
  }
  plan.pingpong = fwd_pingpong(plan.head_dim, plan.block_n);
  return plan;
}

// Ok when `plan` can run the call (one fa3::check covers): one of kFwdKernels at the call's head
// dims and score path; the 144/176-key d128 tiles on calls without causal or window limits (they
// never ran masked); TMA stores on dense calls; else the error fa3::fwd answers.
inline Status check_fwd_plan(const FwdPlan& plan, const AttnProblem& p) {
  const auto refuse = [](const std::string& why) {
    return Status::error(ErrorCode::InvalidArgument, "plan", "argument 'plan': fa3 fwd: the forced plan " + why);
  };
  if (plan.head_dim != kernel_head_dim(p.head_dim) || plan.head_dim_v != kernel_head_dim(p.head_dim_v))
    return refuse("has head dims " + std::to_string(plan.head_dim) + " / " + std::to_string(plan.head_dim_v) +
                  ", the call runs at " + std::to_string(kernel_head_dim(p.head_dim)) + " / " +
                  std::to_string(kernel_head_dim(p.head_dim_v)));
  if (plan.general_score != !p.plain_forward_scores())
    return refuse("takes another score path than the call (softcap, ALiBi or scale <= 0)");
  if (std::none_of(std::begin(kFwdKernels), std::end(kFwdKernels), [&](const FwdKernelShape& k) { return same_kernel(k, plan); }))
    return refuse("names no built kernel (" + std::to_string(plan.block_n) + " keys, " + std::to_string(plan.consumers) +
                  " consumers, ping-pong " + (plan.pingpong ? "on" : "off") + "; fa3/fwd_plan.h lists them)");
  if (p.mask.limits_keys() && plan.head_dim == 128 && plan.block_n != 128)
    return refuse("takes a key tile of " + std::to_string(plan.block_n) + " keys, which runs without causal or window limits only");
  if (plan.tma_store_o && !out_is_dense(p)) return refuse("stores O by TMA, which takes dense calls only");
  if (plan.section_mb < 0) return refuse("has a negative section size");
  return {};
}

}  // namespace flashattn::fa3
