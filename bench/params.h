// The benchmark's calls: the same FwdParams/BwdParams/KvCacheParams for every runner, whatever
// owns the tensors.
#pragma once

#include "flashattn/flashattn.h"
#include "grid.h"

namespace flashattn::bench {

struct AttentionViews {
  TensorView q, k, v, out, lse;
  TensorView dout, dq, dk, dv;  // backward only
};

inline FwdParams make_fwd_params(const Shape& s, const AttentionViews& t, Backend backend, void* stream = nullptr,
                                 int decode_splits = 0) {
  FwdParams p;
  p.q = t.q;
  p.k = t.k;
  p.v = t.v;
  p.out = t.out;
  p.softmax_lse = t.lse;
  p.causal = s.causal;
  p.backend = backend;
  p.stream = stream;
  p.num_splits = s.seqlen_q == 1 ? decode_splits : 1;  // decode: the library splits the keys unless told
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

// The tensors of a fwd_kvcache case; k_new/v_new and block_table undefined when not used.
struct KvCacheViews {
  TensorView q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, out, lse;
};

inline KvCacheParams make_kvcache_params(const Shape& s, const KvCacheViews& t, Backend backend,
                                         void* stream = nullptr, int decode_splits = 0) {
  KvCacheParams p;
  p.q = t.q;
  p.k_cache = t.k_cache;
  p.v_cache = t.v_cache;
  p.k_new = t.k_new;
  p.v_new = t.v_new;
  p.cache_seqlens = t.cache_seqlens;
  p.block_table = t.block_table;
  p.out = t.out;
  p.softmax_lse = t.lse;
  p.causal = s.causal;
  p.backend = backend;
  p.stream = stream;
  p.num_splits = decode_splits;  // default 0: the library chooses, as serving leaves it
  return p;
}

}  // namespace flashattn::bench
