// The FA3 fp8 forward's entry: which calls it covers (check_fp8), the plan of a call, its tensor
// maps, and the dispatch to the head-dim translation units (fp8_fwd_hdim*.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fa3/fa3_backend.h"
#include "fa3/fp8_fwd_launch.cuh"
#include "fa3/fp8_fwd_plan.h"
#include "fa3/fp8_fwd_tiles.h"
#include "fa3/fwd_plan.h"
#include "fa3/launch_common.h"

namespace flashattn::fa3 {
namespace {

Status unsupported(const std::string& why) { return Status::error(ErrorCode::Unsupported, "q", "fa3 fp8 fwd: " + why); }
Status unsupported_plan(const std::string& why) { return Status::error(ErrorCode::Unsupported, "plan", "fa3 fp8 fwd: " + why); }

// The head dim an fp8 call runs at: 64, 128 or 256 (its q/k and v head dims in one class).
int fp8_head_dim(int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

// pads_at_most: fa3/fwd_plan.h (the 16-bit forward's rule).

Fp8FwdPlan plan_of(const Fp8Tile& t) {
  Fp8FwdPlan plan;
  plan.head_dim = t.head_dim;
  plan.block_m = t.block_m;
  plan.block_n = t.block_n;
  plan.general_score = t.general_score;
  plan.pingpong = t.pingpong;
  plan.no_key_limits = t.no_key_limits;
  return plan;
}

const Fp8Tile* find_tile(int head_dim, int block_m, int block_n, bool general_score, bool pingpong, bool no_key_limits = false) {
  for (const Fp8Tile& t : kFp8Tiles)
    if (t.head_dim == head_dim && t.block_m == block_m && t.block_n == block_n && t.general_score == general_score &&
        t.pingpong == pingpong && t.no_key_limits == no_key_limits)
      return &t;
  return nullptr;
}

}  // namespace

Status check_fp8(const AttnProblem& p) {
  if (p.dtype != DType::F8E4M3) return unsupported("takes float8_e4m3fn q, k and v");
  if (p.out_dtype != DType::BF16 && p.out_dtype != DType::F16) return unsupported("writes out in bfloat16 or float16");
  const int d = fp8_head_dim(p.head_dim), dv = fp8_head_dim(p.head_dim_v);
  if (d != dv)
    return unsupported("head_dim and head_dim_v in the same size class (<= 64, <= 128, <= 256), got " + std::to_string(p.head_dim) +
                       " / " + std::to_string(p.head_dim_v));
  // Everything else as the 16-bit forward covers it (layouts, no KV cache, dropout or split-KV,
  // index bounds): its check on the same call in 16 bits at the kernel's head dim.
  AttnProblem as16 = p;
  as16.dtype = as16.out_dtype = DType::BF16;
  as16.head_dim = as16.head_dim_v = d;
  return check(as16);
}

Fp8FwdPlan fp8_fwd_plan(const AttnProblem& p) {
  const int d = fp8_head_dim(std::max(p.head_dim, p.head_dim_v));
  const int64_t sq = p.lens.seqlen_q, sk = p.lens.seqlen_k;
  const bool general = !p.plain_forward_scores(), masked = p.mask.limits_keys();
  const Fp8Tile* tile = nullptr;
  if (general) {
    tile = find_tile(d, 128, d == 256 ? 64 : 128, true, false);
  } else if (d == 64) {
    // Three consumer warpgroups (192 rows) unless that pads the call 7 % more than 128 x 128;
    // 160 keys (FA3's tile, without ping-pong: +2 % at 2k, docs/PERF.md).
    if (pads_at_most(sq, sk, 192, 160, 128, 128, 0.07)) tile = find_tile(64, 192, 160, false, false, !masked);
    else if (pads_at_most(sq, sk, 192, 128, 128, 128, 0.07)) tile = find_tile(64, 192, 128, false, true);
    else tile = find_tile(64, 128, 128, false, true);
  } else if (d == 128) {
    // 224 keys (FA3's tile) from 1k keys, when that pads the keys at most 4 % more than 128.
    const bool wide = sk >= 1024 && pads_at_most(1, sk, 1, 224, 1, 128, 0.04);
    tile = find_tile(128, 128, wide ? 224 : 128, false, false);
  } else {
    tile = find_tile(256, 128, 128, false, false);  // FA3's tile, without ping-pong
  }
  if (tile == nullptr) return {};
  Fp8FwdPlan plan = plan_of(*tile);
  // O by TMA stores from head dim 128 on dense calls where it fits the V stages: +2 to +6 % at
  // 2k, level from 16k (docs/PERF.md, nineteenth session).
  plan.tma_store_o = d >= 128 && out_is_dense(p) && fp8_o_fits_v_stages(plan.block_m, plan.block_n);
  return plan;
}

std::vector<Fp8FwdPlan> fp8_fwd_plans(const AttnProblem& p) {
  std::vector<Fp8FwdPlan> plans;
  const int d = fp8_head_dim(std::max(p.head_dim, p.head_dim_v));
  const bool dense = out_is_dense(p);
  for (const Fp8Tile& t : kFp8Tiles)
    if (t.head_dim == d && t.general_score == !p.plain_forward_scores() && !(t.no_key_limits && p.mask.limits_keys())) {
      plans.push_back(plan_of(t));
      if (dense && fp8_o_fits_v_stages(t.block_m, t.block_n)) {
        plans.push_back(plan_of(t));
        plans.back().tma_store_o = true;
      }
    }
  return plans;
}

Status check_fp8_fwd_plan(const Fp8FwdPlan& plan, const AttnProblem& p) {
  if (plan.head_dim != fp8_head_dim(std::max(p.head_dim, p.head_dim_v)))
    return Status::error(ErrorCode::InvalidArgument, "plan",
                         "fa3 fp8 fwd: the plan's head dim " + std::to_string(plan.head_dim) + " is not the call's class");
  if (plan.general_score != !p.plain_forward_scores())
    return Status::error(ErrorCode::InvalidArgument, "plan",
                         "fa3 fp8 fwd: the plan's general_score must say whether the call has softcap, ALiBi or a scale <= 0");
  const Fp8Tile* tile = find_tile(plan.head_dim, plan.block_m, plan.block_n, plan.general_score, plan.pingpong, plan.no_key_limits);
  if (tile == nullptr) return unsupported_plan("no kernel is built for this plan (fp8_fwd_tiles.h)");
  if (tile->no_key_limits && p.mask.limits_keys()) return unsupported_plan("this tile runs calls without causal or window limits only");
  if (plan.tma_store_o && !fp8_o_fits_v_stages(plan.block_m, plan.block_n))
    return unsupported_plan("O by TMA stores needs O to fit the V stages (block_m <= block_n)");
  if (plan.tma_store_o && !out_is_dense(p)) return unsupported_plan("O by TMA stores takes dense calls only");
  return {};
}

Status fwd_fp8(const AttnProblem& p, void* stream, const Fp8FwdPlan* forced_plan) {
  if (Status st = require_sm90("fa3 fp8 fwd"); !st.ok()) return st;
  if (Status st = check_fp8(p); !st.ok()) return st;
  const Fp8FwdPlan plan = forced_plan != nullptr ? *forced_plan : fp8_fwd_plan(p);
  if (Status st = check_fp8_fwd_plan(plan, p); !st.ok()) return st;
  const auto s = static_cast<cudaStream_t>(stream);
  AttnProblem clamped = p;
  const SeqlenBounds bounds = seqlen_bounds(p);
  clamped.mask = clamp_windows(p.mask, bounds.q, bounds.k);
  switch (plan.head_dim) {
    case 64: return fp8_fwd_hdim64(clamped, s, plan);
    case 128: return fp8_fwd_hdim128(clamped, s, plan);
    default: return fp8_fwd_hdim256(clamped, s, plan);
  }
}

}  // namespace flashattn::fa3
