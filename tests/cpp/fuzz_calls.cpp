#include "fuzz_calls.h"

#include <vector>

namespace flashattn::test {
namespace {

std::vector<int64_t> out_shape(const AttentionRun& run) {
  std::vector<int64_t> shape = run.q.shape();
  shape.back() = run.config().dv();
  return shape;
}

std::vector<int64_t> lse_shape(const AttentionRun& run) {
  const AttentionCase& c = run.config();
  if (c.varlen()) return {c.heads_q, run.q.shape()[0]};
  return {c.batch, c.heads_q, c.seqlen_q};
}

HostTensor poisoned(DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  t.poison();
  return t;
}

}  // namespace

FwdCall::FwdCall(const AttentionCase& c, std::mt19937_64& rng, Backend backend)
    : run(c), out(poisoned(c.dtype, out_shape(run))), lse(poisoned(DType::F32, lse_shape(run))) {
  params = run.fwd_params(out.view(), rng() % 4 ? lse.view() : TensorView{}, backend);
}

BwdCall::BwdCall(const AttentionCase& c, std::mt19937_64& rng, Backend backend)
    : run(c), dq(poisoned(c.dtype, run.q.shape())), dk(poisoned(c.dtype, run.k.shape())),
      dv(poisoned(c.dtype, run.v.shape())) {
  run.out = HostTensor(c.dtype, out_shape(run));
  run.lse = HostTensor(DType::F32, lse_shape(run));
  run.out.fill_normal(rng);
  run.lse.fill_normal(rng);
  params = run.bwd_params(dq.view(), dk.view(), dv.view(), backend);
  params.deterministic = rng() % 2;
}

KvCall::KvCall(const KvCase& c, std::mt19937_64& rng, Backend backend)
    : run(c), k_cache(run.k_cache), v_cache(run.v_cache), out(poisoned(c.dtype, run.out_shape())),
      lse(poisoned(DType::F32, run.lse_shape())) {
  params = run.params(k_cache, v_cache, out.view(), rng() % 4 ? lse.view() : TensorView{}, backend);
}

CombineCall::CombineCall(const CombineCase& c, std::mt19937_64& rng, Backend backend) {
  const int64_t splits = c.splits, batch = c.varlen ? 1 : c.batch;
  out_partial = HostTensor(DType::F32, c.varlen ? std::vector<int64_t>{splits, c.seqlen, c.heads, c.head_dim}
                                                : std::vector<int64_t>{splits, batch, c.seqlen, c.heads, c.head_dim});
  lse_partial = HostTensor(DType::F32, c.varlen ? std::vector<int64_t>{splits, c.heads, c.seqlen}
                                                : std::vector<int64_t>{splits, batch, c.heads, c.seqlen});
  out = poisoned(c.out_dtype, c.varlen ? std::vector<int64_t>{c.seqlen, c.heads, c.head_dim}
                                       : std::vector<int64_t>{batch, c.seqlen, c.heads, c.head_dim});
  lse = poisoned(DType::F32, c.varlen ? std::vector<int64_t>{c.heads, c.seqlen}
                                      : std::vector<int64_t>{batch, c.heads, c.seqlen});
  out_partial.fill_normal(rng);
  lse_partial.fill_normal(rng);
  params.out_partial = out_partial.view();
  params.lse_partial = lse_partial.view();
  params.out = out.view();
  if (c.with_lse) params.softmax_lse = lse.view();
  params.backend = backend;
}

}  // namespace flashattn::test
