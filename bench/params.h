// The benchmark's calls: the same FwdParams/BwdParams for every runner, whatever owns the tensors.
#pragma once

#include "flashattn/flashattn.h"
#include "grid.h"

namespace flashattn::bench {

struct AttentionViews {
  TensorView q, k, v, out, lse;
  TensorView dout, dq, dk, dv;  // backward only
};

inline FwdParams make_fwd_params(const Shape& s, const AttentionViews& t, Backend backend, void* stream = nullptr) {
  FwdParams p;
  p.q = t.q;
  p.k = t.k;
  p.v = t.v;
  p.out = t.out;
  p.softmax_lse = t.lse;
  p.causal = s.causal;
  p.backend = backend;
  p.stream = stream;
  p.num_splits = s.seqlen_q == 1 ? 0 : 1;  // decode: let the library split the keys
  return p;
}

inline BwdParams make_bwd_params(const Shape& s, const AttentionViews& t, Backend backend, void* stream = nullptr,
                                 bool deterministic = false) {
  BwdParams p;
  p.deterministic = deterministic;
  p.q = t.q;
  p.k = t.k;
  p.v = t.v;
  p.out = t.out;
  p.dout = t.dout;
  p.softmax_lse = t.lse;
  p.dq = t.dq;
  p.dk = t.dk;
  p.dv = t.dv;
  p.causal = s.causal;
  p.backend = backend;
  p.stream = stream;
  return p;
}

}  // namespace flashattn::bench
