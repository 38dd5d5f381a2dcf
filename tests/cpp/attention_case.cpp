#include "attention_case.h"

#include <gtest/gtest.h>

#include <numeric>
#include <sstream>

#include "api/validate.h"
#include "cpu/reference.h"

namespace flashattn::test {

std::string AttentionCase::name() const {
  std::ostringstream s;
  s << "b" << batch << "_sq" << seqlen_q << "_sk" << seqlen_k << "_h" << heads_q << "x" << heads_k << "_d"
    << head_dim;
  if (head_dim_v > 0) s << "_dv" << head_dim_v;
  s << "_" << dtype_name(dtype);
  if (causal) s << "_causal";
  if (window_left >= 0 || window_right >= 0) s << "_win" << window_left << "_" << window_right;
  if (softcap > 0) s << "_softcap";
  if (alibi) s << "_alibi" << alibi;
  if (dropout_p > 0) s << "_dropout";
  if (varlen()) s << "_varlen" << varlen_q.size();
  if (!seqused_k.empty()) s << "_seqused";
  if (num_splits != 1) s << "_splits" << num_splits;
  return s.str();
}

std::vector<int64_t> AttentionRun::qkv_shape(bool is_q, int dim) const {
  const int heads = is_q ? c_.heads_q : c_.heads_k;
  if (c_.varlen()) return {is_q ? total_q_ : total_k_, heads, dim};
  return {c_.batch, is_q ? c_.seqlen_q : c_.seqlen_k, heads, dim};
}

AttentionRun::AttentionRun(const AttentionCase& c) : c_(c) {
  std::mt19937_64 rng(c.seed);
  if (c.varlen()) {
    c_.batch = int(c.varlen_q.size());
    std::vector<int32_t> cq{0}, ck{0};
    for (int i = 0; i < c_.batch; ++i) {
      cq.push_back(cq.back() + c.varlen_q[size_t(i)]);
      ck.push_back(ck.back() + c.varlen_k[size_t(i)]);
      max_q_ = std::max(max_q_, c.varlen_q[size_t(i)]);
      max_k_ = std::max(max_k_, c.varlen_k[size_t(i)]);
    }
    total_q_ = cq.back();
    total_k_ = ck.back();
    cu_q = int_tensor(cq);
    cu_k = int_tensor(ck);
  }
  if (!c.seqused_k.empty()) seqused = int_tensor(std::vector<int32_t>(c.seqused_k.begin(), c.seqused_k.end()));
  q = HostTensor(c.dtype, qkv_shape(true, c.head_dim));
  k = HostTensor(c.dtype, qkv_shape(false, c.head_dim));
  v = HostTensor(c.dtype, qkv_shape(false, c_.dv()));
  dout = HostTensor(c.dtype, qkv_shape(true, c_.dv()));
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  dout.fill_normal(rng);
  if (c.alibi == 1) {
    alibi_slopes = HostTensor(DType::F32, {c.heads_q});
    alibi_slopes.fill_uniform(rng, 0.05f, 0.5f);
  } else if (c.alibi == 2) {
    alibi_slopes = HostTensor(DType::F32, {c_.batch, c.heads_q});
    alibi_slopes.fill_uniform(rng, 0.05f, 0.5f);
  }
}

FwdParams AttentionRun::fwd_params(TensorView out_view, TensorView lse_view, Backend backend) const {
  FwdParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out_view;
  p.softmax_lse = lse_view;
  p.causal = c_.causal;
  p.window_left = c_.window_left;
  p.window_right = c_.window_right;
  p.softcap = c_.softcap;
  p.alibi_slopes = alibi_slopes.view();
  p.dropout_p = c_.dropout_p;
  p.dropout_seed = 0x1234abcd5678ull + c_.seed;
  p.dropout_offset = 77;
  p.num_splits = c_.num_splits;
  p.backend = backend;
  if (c_.varlen()) {
    p.cu_seqlens_q = cu_q.view();
    p.cu_seqlens_k = cu_k.view();
    p.max_seqlen_q = max_q_;
    p.max_seqlen_k = max_k_;
  }
  p.seqused_k = seqused.view();
  return p;
}

BwdParams AttentionRun::bwd_params(TensorView dq, TensorView dk, TensorView dv, Backend backend) const {
  const FwdParams f = fwd_params(out.view(), lse.view(), backend);
  BwdParams p;
  static_cast<AttnOptions&>(p) = f;
  static_cast<VarlenArgs&>(p) = f;
  static_cast<DropoutArgs&>(p) = f;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.dout = dout.view();
  p.softmax_lse = f.softmax_lse;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  return p;
}

namespace {

std::vector<int64_t> lse_shape(const AttentionCase& c, int total_q) {
  if (c.varlen()) return {c.heads_q, total_q};
  return {c.batch, c.heads_q, c.seqlen_q};
}

Errors errors(const HostTensor& fast, const HostTensor& ref64, const HostTensor& same_precision) {
  const std::vector<float> r = ref64.to_float();
  return {max_abs_diff(fast.to_float(), r), max_abs_diff(same_precision.to_float(), r), max_abs(r)};
}

}  // namespace

FwdResult AttentionRun::check_fwd(Backend backend) {
  const std::vector<int64_t> out_shape = qkv_shape(true, c_.dv());
  const std::vector<int64_t> lshape = lse_shape(c_, total_q_);
  out = HostTensor(c_.dtype, out_shape);
  lse = HostTensor(DType::F32, lshape);
  out.poison();
  lse.poison();
  const Status st = fwd(fwd_params(out.view(), lse.view(), backend));
  EXPECT_TRUE(st.ok()) << st.message();

  HostTensor out64(DType::F32, out_shape), lse64(DType::F32, lshape);
  HostTensor out_lp(c_.dtype, out_shape), lse_lp(DType::F32, lshape);
  for (auto [o, l, precision] : {std::tuple{&out64, &lse64, cpu::reference::Precision::Float64},
                                 std::tuple{&out_lp, &lse_lp, cpu::reference::Precision::InputPrecision}}) {
    o->poison();
    l->poison();
    AttnProblem problem;
    const Status built = api::make_fwd_problem(fwd_params(o->view(), l->view(), Backend::Cpu), &problem,
                                               {.allow_f32_outputs = true});
    EXPECT_TRUE(built.ok()) << built.message();
    cpu::reference::fwd(problem, precision);
  }
  return {errors(out, out64, out_lp), errors(lse, lse64, lse_lp)};
}

BwdResult AttentionRun::check_bwd(Backend backend) {
  check_fwd(backend);
  HostTensor dq(c_.dtype, q.shape()), dk(c_.dtype, k.shape()), dv(c_.dtype, v.shape());
  dq.poison();
  dk.poison();
  dv.poison();
  const Status st = bwd(bwd_params(dq.view(), dk.view(), dv.view(), backend));
  EXPECT_TRUE(st.ok()) << st.message();

  HostTensor dq64(DType::F32, q.shape()), dk64(DType::F32, k.shape()), dv64(DType::F32, v.shape());
  HostTensor dq_lp(c_.dtype, q.shape()), dk_lp(c_.dtype, k.shape()), dv_lp(c_.dtype, v.shape());
  for (auto [gq, gk, gv, precision] :
       {std::tuple{&dq64, &dk64, &dv64, cpu::reference::Precision::Float64},
        std::tuple{&dq_lp, &dk_lp, &dv_lp, cpu::reference::Precision::InputPrecision}}) {
    BwdProblem problem;
    const Status built = api::make_bwd_problem(bwd_params(gq->view(), gk->view(), gv->view(), Backend::Cpu),
                                               &problem, {.allow_f32_outputs = true});
    EXPECT_TRUE(built.ok()) << built.message();
    cpu::reference::bwd(problem, precision);
  }
  return {errors(dq, dq64, dq_lp), errors(dk, dk64, dk_lp), errors(dv, dv64, dv_lp)};
}

void expect_within(const Errors& e, double factor, double floor, const std::string& what) {
  EXPECT_LE(e.fast, factor * e.same_precision + floor)
      << what << ": error " << e.fast << " vs same-precision reference error " << e.same_precision
      << " (max |ref| " << e.reference_max << ")";
}

}  // namespace flashattn::test
