// The FA3 backend (wgmma/TMA kernels, sm90a). Compiled only when the library is built with CUDA.
#pragma once

#include "common/problem.h"
#include "fa3/bwd_plan.h"
#include "fa3/fp8_fwd_plan.h"
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

// The fp8 (e4m3) forward over device tensors on `stream`: q/k/v float8_e4m3fn with descales,
// out bfloat16 or float16, the features of fwd (causal, windows, softcap, ALiBi, GQA/MQA, varlen,
// seqused_k), head dims up to 256 with q/k and v in one class (<= 64, <= 128, <= 256). `plan`
// forces a kernel (one of fp8_fwd_plans; null: fp8_fwd_plan's). The softmax takes its running max
// on raw scores, so q_descale * k_descale must be positive (as in FlashAttention-3). Not yet run
// on a GPU: fwd and check refuse fp8 calls until kFp8FwdEnabled (fp8_fwd_plan.h).
Status fwd_fp8(const AttnProblem& problem, void* stream, const Fp8FwdPlan* plan = nullptr);

// Whether fwd_fp8 covers the problem (host-side): Ok, or Unsupported saying why.
Status check_fp8(const AttnProblem& problem);

// Backward over device tensors on `stream` (workspaces are stream-ordered allocations): fp16/bf16,
// head dims up to 256 with head_dim and head_dim_v in one size class, dense or varlen, causal,
// windows, softcap, ALiBi, GQA/MQA, seqused_k, deterministic; no dropout. `plan` forces a kernel
// choice (null: bwd_plan's), a variant of bwd_variants.h included; InvalidArgument naming "plan"
// when it does not fit the call or names a kernel that is not built.
Status bwd(const BwdProblem& problem, void* stream, const BwdPlan* plan = nullptr);

// Whether bwd covers the problem (host-side): Ok, or Unsupported saying why. Backend::Auto takes
// the FA3 backward on sm90 exactly when this is Ok.
Status check_bwd(const BwdProblem& problem);

// The tile choice bwd makes for a call it covers.
BwdPlan bwd_plan(const BwdProblem& problem);

// Ok when `plan` can run a call that check_bwd covers (bwd's check of a forced plan): it fits the
// call's head dim and score path, names a built kernel, and its section_mb and row_stagger are
// valid (row_stagger 1 in deterministic mode); else InvalidArgument naming 'plan'.
Status check_bwd_plan(const BwdPlan& plan, const BwdProblem& problem);

// log2 of the (sequence, kv head) groups per section of the backward's CTA order for a plan's
// section_mb (fa3/tile_order.h), with rows_padded workspace rows per query head and key_blocks
// CTAs per group: the largest power of two of groups whose Q, dO and fp32 dQ rows fit in
// section_mb that divides the group count; without section_mb, with section_per_wave, the largest
// whose key blocks fit `sms` CTAs; 0 (one group at a time) without either or when the CTA
// positions would not fit 31 bits.
int bwd_section_shift(const BwdProblem& problem, const BwdPlan& plan, int64_t rows_padded, int64_t key_blocks, int sms);

}  // namespace flashattn::fa3
