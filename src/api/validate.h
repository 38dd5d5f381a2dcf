// From the public parameters to the normalised problems the backends run: every rule of the API
// is checked (see rules.h) before anything is filled in, so a backend can trust what it gets.
// Content checks (cu_seqlens, seqused_k, cache_seqlens, cache_leftpad, cache_batch_idx, block
// tables) read host tensors only; for CUDA tensors they are skipped, and their contents must keep
// the rules, or the results are unspecified. They are not trusted for memory safety, though: the
// shared accessors (common/rows.h, common/problem.h) and the FA2 kernels clamp every entry into
// the bounds filled in here from the validated shapes (FA3's TMA loads clip on their own), so
// garbage gives garbage numbers, never an access outside a tensor (the GPU fuzz's
// Fa2FuzzContents checks it). Valid contents are unchanged by the clamps.
#pragma once

#include "common/kvcache_problem.h"
#include "common/problem.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

struct ProblemOptions {
  // Lets out (and dq/dk/dv, dout) be float32 whatever the inputs' dtype: the tests' reference
  // writes float32 results from half-precision inputs. In backward, the problem's out_dtype is
  // then the gradients' dtype (the reference does not read out).
  bool allow_f32_outputs = false;
};

Status make_fwd_problem(const FwdParams& params, AttnProblem* problem, ProblemOptions options = {});
Status make_bwd_problem(const BwdParams& params, BwdProblem* problem, ProblemOptions options = {});
Status make_kvcache_problem(const KvCacheParams& params, KvCacheProblem* problem, ProblemOptions options = {});
Status make_combine_problem(const CombineParams& params, CombineProblem* problem);
// The mask: uint8 (batch, heads, seqlen_q, seqlen_k), contiguous, on the host; dropout_p in [0, 1).
Status validate_dropout_mask(const DropoutMaskParams& params);

}  // namespace flashattn::api
