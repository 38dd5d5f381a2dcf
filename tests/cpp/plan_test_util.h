// Shared by the plan tests (test_fa2_fwd_plan.cpp, test_fa2_bwd_plan.cpp, test_fa3_fwd_plan.cpp):
// the devices the FA2 plans are pinned on, and calls described by their shape alone (the plans
// read no tensor contents; pointers only mark a feature as present).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/problem.h"
#include "fa2/device_limits.h"
#include "flashattn/flashattn.h"

namespace flashattn::test {

// cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin, compute capability.
inline constexpr fa2::DeviceLimits kH200{132, 227 * 1024, 90};
inline constexpr fa2::DeviceLimits kA100{108, 163 * 1024, 80};
inline constexpr fa2::DeviceLimits kSm86{84, 99 * 1024, 86};

// An H200 as the FLASHATTN_FA2_AS_SM80 build sees it (fa2/device_limits.h).
inline fa2::DeviceLimits h200_as_sm80_build() { return fa2::as_sm80_build(kH200); }

// Stand-ins that mark a pointer feature as present.
inline const float kSomeSlopes[1] = {0.5f};
inline const int32_t kSomeIndices[1] = {0};

// A dense bf16 call: batch 2, heads_q / heads_k, no features.
inline AttnProblem plan_call(int64_t head_dim, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q = 8,
                             int64_t heads_k = 8) {
  AttnProblem p;
  p.dtype = p.out_dtype = DType::BF16;
  p.batch = 2;
  p.heads_q = heads_q;
  p.heads_k = heads_k;
  p.head_dim = p.head_dim_v = head_dim;
  p.lens.seqlen_q = seqlen_q;
  p.lens.seqlen_k = seqlen_k;
  p.lens.total_q = p.batch * seqlen_q;
  p.lens.total_k = p.batch * seqlen_k;
  p.score.scale = float(1.0 / std::sqrt(double(head_dim)));
  return p;
}

inline AttnProblem causal(AttnProblem p) {
  p.mask.window_right = 0;
  return p;
}
inline AttnProblem windowed(AttnProblem p, int left, int right) {
  p.mask.window_left = left;
  p.mask.window_right = right;
  return p;
}
inline AttnProblem with_softcap(AttnProblem p) {
  p.score.softcap = 30.f;
  return p;
}
inline AttnProblem with_alibi(AttnProblem p) {
  p.alibi_slopes = kSomeSlopes;
  return p;
}
inline AttnProblem with_negative_scale(AttnProblem p) {
  p.score.scale = -0.125f;
  return p;
}
inline AttnProblem with_dropout(AttnProblem p) {
  p.dropout_p = 0.1f;
  return p;
}
// Varlen queries and keys: seqlen_q / seqlen_k are the max_seqlen bounds.
inline AttnProblem varlen(AttnProblem p) {
  p.lens.cu_seqlens_q = kSomeIndices;
  p.lens.cu_seqlens_k = kSomeIndices;
  p.q.cu_seqlens = p.out.cu_seqlens = kSomeIndices;
  p.k.cu_seqlens = p.v.cu_seqlens = kSomeIndices;
  return p;
}
inline AttnProblem paged(AttnProblem p) {
  p.k.block_table = p.v.block_table = kSomeIndices;
  p.k.page_size = p.v.page_size = 256;
  return p;
}

inline std::string describe(const AttnProblem& p) {
  return "d" + std::to_string(p.head_dim) + "/" + std::to_string(p.head_dim_v) + " sq " + std::to_string(p.lens.seqlen_q) +
         " sk " + std::to_string(p.lens.seqlen_k) + " heads " + std::to_string(p.heads_q) + "/" + std::to_string(p.heads_k) +
         (p.mask.limits_keys() ? " masked" : "") + (p.lens.cu_seqlens_q != nullptr ? " varlen" : "") +
         (p.score.softcap > 0.f ? " softcap" : "") + (p.alibi_slopes != nullptr ? " alibi" : "") +
         (p.dropout_p > 0.f ? " dropout" : "") + (p.k.block_table != nullptr ? " paged" : "");
}

// A failed Status with this code and argument whose message contains `phrase`.
inline ::testing::AssertionResult FailsWith(const Status& status, ErrorCode code, const std::string& argument,
                                            const std::string& phrase) {
  if (status.ok()) return ::testing::AssertionFailure() << "expected an error, got ok";
  if (status.code() != code || status.argument() != argument || status.message().find(phrase) == std::string::npos)
    return ::testing::AssertionFailure() << "got code " << int(status.code()) << ", argument '" << status.argument()
                                         << "': " << status.message();
  return ::testing::AssertionSuccess();
}

}  // namespace flashattn::test
