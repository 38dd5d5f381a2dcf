// The fp8 forward's descale factors of a work tile, with the kv head found in 32 bits (a 64-bit
// division costs the consumers registers at the top of each tile).
#pragma once

#include "common/problem.h"

namespace flashattn::fa3 {

__device__ __forceinline__ int kv_head_32(const AttnProblem& p, int h) { return h / (int(p.heads_q) / int(p.heads_k)); }

// q_descale k_descale of (sequence b, query head h): the factor of its raw scores.
__device__ __forceinline__ float qk_descale_of(const AttnProblem& p, int b, int h) {
  const int hk = kv_head_32(p, h);
  return p.q_descale.at(b, hk) * p.k_descale.at(b, hk);
}

__device__ __forceinline__ float v_descale_of(const AttnProblem& p, int b, int h) { return p.v_descale.at(b, kv_head_32(p, h)); }

}  // namespace flashattn::fa3
