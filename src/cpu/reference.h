// The naive reference: materialises the full score matrix of each (batch, head) and accumulates
// in double. For tests and the benchmark's memory comparison only; O(seqlen_q x seqlen_k) memory.
#pragma once

#include "common/kvcache_problem.h"
#include "common/problem.h"

namespace flashattn::cpu::reference {

enum class Precision {
  Float64,         // every intermediate in double; the ground truth
  InputPrecision,  // what a plain framework implementation in the input dtype does: S rounded to
                   // the input dtype after Q.K^T, P rounded before P.V (and, in the backward,
                   // dP and dS rounded), float accumulation inside each product
};

// Writes problem.out (any float dtype, F32 allowed) and problem.lse when given. fp8 inputs are
// dequantised by their descales first (the fp8 oracle: Float64 leaves P unrounded).
void fwd(const AttnProblem& problem, Precision precision);
// Writes dq, dk, dv (any float dtype). Uses problem.fwd.out and lse only through their math:
// the reference recomputes P from scratch (it does not trust the given lse).
void bwd(const BwdProblem& problem, Precision precision);
// Appends k_new/v_new (with rotary) into the cache, rotates q, then runs fwd over the cache.
// Mutates the cache like the real call does.
void fwd_kvcache(const KvCacheProblem& problem, Precision precision);

}  // namespace flashattn::cpu::reference
