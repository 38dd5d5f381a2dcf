// The arithmetic of the naive reference for one (sequence, query head): plain row-major double
// arrays in, plain double arrays out. reference::fwd/bwd/fwd_kvcache gather each head's rows into
// these arrays and scatter the results back, so tests that check this core (finite differences,
// hand-made cases) check the code every backend is compared against.
#pragma once

#include <cstdint>
#include <vector>

#include "common/mask.h"
#include "common/score.h"
#include "flashattn/flashattn.h"

namespace flashattn::cpu::reference {

// Which arithmetic a head is computed in.
struct HeadMath {
  // false: every intermediate in double (ground truth). true: emulate a framework working in the
  // input dtype: float accumulation inside each product, S/logits/dP/dS rounded to score_dtype,
  // P rounded to prob_dtype.
  bool input_precision = false;
  DType score_dtype = DType::F32;
  DType prob_dtype = DType::F32;
};

struct HeadProblem {
  int64_t seqlen_q = 0, seqlen_k = 0, head_dim = 0, head_dim_v = 0;
  const double* q = nullptr;  // [seqlen_q][head_dim]
  const double* k = nullptr;  // [seqlen_k][head_dim]
  const double* v = nullptr;  // [seqlen_k][head_dim_v]
  ScoreParams score;
  MaskParams mask;
  float alibi_slope = 0.f;  // 0 = no ALiBi
  float dropout_p = 0.f;
  const uint8_t* keep = nullptr;  // [seqlen_q][seqlen_k], 1 = weight kept; read iff dropout_p > 0
  HeadMath math;
};

struct HeadForward {
  std::vector<double> out;  // [seqlen_q][head_dim_v]; 0 for rows that see no key
  std::vector<double> lse;  // [seqlen_q]; natural-log sum-exp of the visible logits, -inf if none
};

struct HeadGradients {
  std::vector<double> dq;  // [seqlen_q][head_dim]
  std::vector<double> dk;  // [seqlen_k][head_dim]
  std::vector<double> dv;  // [seqlen_k][head_dim_v]
};

HeadForward head_forward(const HeadProblem& problem);
// Gradients of sum(dout * out) with respect to q, k and v; dout is [seqlen_q][head_dim_v].
// Recomputes everything from q, k, v (nothing from a previous forward is trusted).
HeadGradients head_backward(const HeadProblem& problem, const double* dout);

// The float a double result is stored through so that the store's own rounding to dtype gives
// the correctly rounded value of x (round-to-odd into float, then the store rounds to nearest:
// avoids double rounding). For F32 it is simply x rounded to nearest.
float narrow_for_store(double x, DType dtype);

}  // namespace flashattn::cpu::reference
