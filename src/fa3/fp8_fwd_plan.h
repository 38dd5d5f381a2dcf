// The kernel choice of one FA3 fp8 (e4m3) forward: fa3::fp8_fwd_plan picks it per call; tests
// and benchmarks pass their own to fa3::fwd_fp8 (fa3_backend.h), one of fp8_fwd_plans(problem).
#pragma once

#include <vector>

#include "common/problem.h"

namespace flashattn::fa3 {

// Off until the fp8 kernels have passed their GPU tests (tools/gpu/fp8.sh). While off, fp8 calls
// through the public API on a GPU are refused as before (fa3::check, api/entry.cpp), and only
// fa3::fwd_fp8 with a forced plan runs the kernels. On: fa3::check covers fp8, Backend::Auto and
// Backend::Fa3 take fp8 inputs to fa3::fwd_fp8 with fp8_fwd_plan's choice.
inline constexpr bool kFp8FwdEnabled = true;

struct Fp8FwdPlan {
  int head_dim = 0;            // the kernel's: 64, 128 or 256 (q, k and v in one class)
  int block_m = 0;             // query rows per tile: 128, or 192 (three consumer warpgroups, d64)
  int block_n = 0;             // keys per tile
  bool general_score = false;  // softcap, ALiBi or a scale <= 0: must match the call
  bool pingpong = false;       // the consumer warpgroups take turns on the tensor cores
  // The tile's kernel for calls without causal or window limits (only the last key tile is
  // masked, the same for every row): a few percent faster at d64 (docs/PERF.md).
  bool no_key_limits = false;
  // Persistent CTAs taking tiles from a counter for tiles of unequal length (causal, windows,
  // varlen, seqused_k), else a CTA per such tile; with sections of section_mb of K and V.
  bool dynamic_schedule = true;
  int section_mb = 16;
  // O staged in the V stages (the transposes' input, free once a tile's last V is transposed)
  // and written by TMA stores, as the 16-bit forward; dense calls of tiles whose O fits there
  // (block_m <= block_n), else (and on varlen calls) stores from registers.
  bool tma_store_o = false;
};

// The plan fwd_fp8 takes for a call without a forced one (the call must pass check_fp8).
Fp8FwdPlan fp8_fwd_plan(const AttnProblem& problem);

// Every plan whose kernel is built and can run the call (tests force each one).
std::vector<Fp8FwdPlan> fp8_fwd_plans(const AttnProblem& problem);

// Whether a forced plan can run the call (host-side; fwd_fp8 checks every plan with it): Ok, or
// an error naming "plan" (InvalidArgument: the head dim class or score path is not the call's;
// Unsupported: no built kernel, or one the call's mask or layout rules out).
Status check_fp8_fwd_plan(const Fp8FwdPlan& plan, const AttnProblem& problem);

}  // namespace flashattn::fa3
