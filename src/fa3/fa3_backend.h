// The FA3 backend (wgmma/TMA kernels, sm90a). Compiled only when the library is built with CUDA.
#pragma once

#include "common/problem.h"
#include "fa3/bwd_plan.h"
#include "fa3/fwd_plan.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// Forward over device tensors on `stream`. Today: dense or varlen layout, fp16/bf16, head dims up
// to 256 with head_dim and head_dim_v in one size class (or <= 192 with <= 128), no dropout, no
// split-KV, no KV cache; anything else answers Unsupported (the FA2 path takes it). `plan` forces
// a kernel (tests, benchmarks; null: fwd_plan's); a plan that cannot run the call answers an error
// (check_fwd_plan).
Status fwd(const AttnProblem& problem, void* stream, const FwdPlan* plan = nullptr);

// Whether fwd covers the problem (host-side, no device access): Ok, or Unsupported saying why.
// Backend::Auto takes the FA3 forward on sm90 exactly when this is Ok.
Status check(const AttnProblem& problem);

// Backward over device tensors on `stream` (workspaces are stream-ordered allocations): fp16/bf16,
// head dims up to 256 with head_dim and head_dim_v in one size class, dense or varlen, causal,
// windows, softcap, ALiBi, GQA/MQA, seqused_k, deterministic; no dropout. `plan` forces a tile
// choice (null: bwd_plan's).
Status bwd(const BwdProblem& problem, void* stream, const BwdPlan* plan = nullptr);

// Whether bwd covers the problem (host-side): Ok, or Unsupported saying why. Backend::Auto takes
// the FA3 backward on sm90 exactly when this is Ok.
Status check_bwd(const BwdProblem& problem);

// The tile choice bwd makes for a call it covers.
BwdPlan bwd_plan(const BwdProblem& problem);

}  // namespace flashattn::fa3
