#include "attention_case.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "common/mask.h"

#include "api/validate.h"
#include "cpu/reference.h"

namespace flashattn::test {

std::string AttentionCase::name() const {
  std::ostringstream s;
  s << "b" << batch << "_sq" << seqlen_q << "_sk" << seqlen_k << "_h" << heads_q << "x" << heads_k << "_d"
    << head_dim;
  if (head_dim_v > 0) s << "_dv" << head_dim_v;
  s << "_" << dtype_name(dtype);
  if (fp8() && fp8_out != DType::BF16) s << "_out" << dtype_name(fp8_out);
  if (causal) s << "_causal";
  if (window_left >= 0 || window_right >= 0) s << "_win" << window_left << "_" << window_right;
  if (softcap > 0) s << "_softcap";
  if (alibi) s << "_alibi" << alibi;
  if (dropout_p > 0) s << "_dropout";
  if (varlen()) s << "_varlen" << varlen_q.size();
  if (!seqused_k.empty()) s << (tight_max_seqlen_k ? "_seqused_tight" : "_seqused");
  if (num_splits != 1) s << "_splits" << num_splits;
  if (softmax_scale) s << (*softmax_scale < 0 ? "_negscale" : "_scale");
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
  if (c.varlen() && c.tight_max_seqlen_k && !c.seqused_k.empty())
    max_k_ = std::max(1, *std::max_element(c.seqused_k.begin(), c.seqused_k.end()));
  q = HostTensor(c.dtype, qkv_shape(true, c.head_dim));
  k = HostTensor(c.dtype, qkv_shape(false, c.head_dim));
  v = HostTensor(c.dtype, qkv_shape(false, c_.dv()));
  dout = HostTensor(c.dtype, qkv_shape(true, c_.dv()));
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  dout.fill_normal(rng);
  // Keys past seqused_k are not part of the problem: NaN there catches a backend that reads them
  // (a kernel that loads whole tiles must mask them, and clear V: P = 0 times NaN is still NaN).
  if (!c.seqused_k.empty()) {
    for (int b = 0; b < c_.batch; ++b) {
      const int64_t first_row = c.varlen() ? int64_t(cu_k.as<int32_t>()[b]) : int64_t(b) * c.seqlen_k;
      const int64_t len = c.varlen() ? int64_t(c.varlen_k[size_t(b)]) : c.seqlen_k;
      for (int64_t r = c.seqused_k[size_t(b)]; r < len; ++r)
        for (int h = 0; h < c.heads_k; ++h) {
          for (int d = 0; d < c.head_dim; ++d) k.set(((first_row + r) * c.heads_k + h) * c.head_dim + d, std::nanf(""));
          for (int d = 0; d < c_.dv(); ++d) v.set(((first_row + r) * c.heads_k + h) * c_.dv() + d, std::nanf(""));
        }
    }
  }
  if (c.alibi == 1) {
    alibi_slopes = HostTensor(DType::F32, {c.heads_q});
    alibi_slopes.fill_uniform(rng, 0.05f, 0.5f);
  } else if (c.alibi == 2) {
    alibi_slopes = HostTensor(DType::F32, {c_.batch, c.heads_q});
    alibi_slopes.fill_uniform(rng, 0.05f, 0.5f);
  }
  if (c.fp8()) {  // drawn last, from their own stream: the draws above match a non-fp8 case's
    std::mt19937_64 descale_rng(c.seed ^ 0xfb8ull);
    for (HostTensor* d : {&q_descale, &k_descale, &v_descale}) {
      *d = HostTensor(DType::F32, {c_.batch, c.heads_k});
      d->fill_uniform(descale_rng, 0.25f, 2.f);
    }
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
  p.softmax_scale = c_.softmax_scale;
  p.backend = backend;
  if (c_.varlen()) {
    p.cu_seqlens_q = cu_q.view();
    p.cu_seqlens_k = cu_k.view();
    // Upper bounds of at least 1: with CUDA cu_seqlens, 0 (derive) is refused.
    p.max_seqlen_q = std::max(max_q_, 1);
    p.max_seqlen_k = std::max(max_k_, 1);
  }
  p.seqused_k = seqused.view();
  p.q_descale = q_descale.view();
  p.k_descale = k_descale.view();
  p.v_descale = v_descale.view();
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

FwdResult AttentionRun::check_fwd(Backend backend, const FwdRunner& runner) {
  const std::vector<int64_t> out_shape = qkv_shape(true, c_.dv());
  const std::vector<int64_t> lshape = lse_shape(c_, total_q_);
  out = HostTensor(c_.out_dtype(), out_shape);
  lse = HostTensor(DType::F32, lshape);
  out.poison();
  lse.poison();
  const FwdParams params = fwd_params(out.view(), lse.view(), backend);
  const Status st = runner ? runner(params) : fwd(params);
  EXPECT_TRUE(st.ok()) << st.message();

  const uint64_t inputs = inputs_hash();
  if (!fwd_refs_ || fwd_refs_->inputs != inputs) {
    fwd_refs_ = FwdReferences{inputs, HostTensor(DType::F32, out_shape), HostTensor(DType::F32, lshape),
                              HostTensor(c_.out_dtype(), out_shape), HostTensor(DType::F32, lshape)};
    for (auto [o, l, precision] : {std::tuple{&fwd_refs_->out64, &fwd_refs_->lse64, cpu::reference::Precision::Float64},
                                   std::tuple{&fwd_refs_->out_lp, &fwd_refs_->lse_lp, cpu::reference::Precision::InputPrecision}}) {
      o->poison();
      l->poison();
      AttnProblem problem;
      const Status built = api::make_fwd_problem(fwd_params(o->view(), l->view(), Backend::Cpu), &problem,
                                                 {.allow_f32_outputs = true});
      EXPECT_TRUE(built.ok()) << built.message();
      cpu::reference::fwd(problem, precision);
    }
  }
  const FwdReferences& r = *fwd_refs_;
  return {errors(out, r.out64, r.out_lp), errors(lse, r.lse64, r.lse_lp)};
}

uint64_t AttentionRun::inputs_hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over each tensor's shape and bytes
  auto mix = [&h](const void* data, size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const HostTensor* t : {&q, &k, &v, &alibi_slopes, &cu_q, &cu_k, &seqused, &q_descale, &k_descale, &v_descale}) {
    const std::vector<int64_t>& shape = t->shape();
    const int64_t header[2] = {int64_t(t->dtype()), int64_t(shape.size())};
    mix(header, sizeof(header));
    mix(shape.data(), shape.size() * sizeof(int64_t));
    if (!shape.empty()) mix(t->data(), size_t(t->numel()) * dtype_size(t->dtype()));
  }
  return h;
}

AttnProblem AttentionRun::problem() const {
  HostTensor o(c_.out_dtype(), qkv_shape(true, c_.dv())), l(DType::F32, lse_shape(c_, total_q_));
  AttnProblem p;
  const Status built = api::make_fwd_problem(fwd_params(o.view(), l.view(), Backend::Cpu), &p, {.allow_f32_outputs = true});
  EXPECT_TRUE(built.ok()) << built.message();
  p.out.data = nullptr;
  p.lse.data = nullptr;
  return p;
}

BwdResult AttentionRun::check_bwd(Backend backend, const FwdRunner& fwd_runner, const BwdRunner& runner) {
  check_fwd(backend, fwd_runner);
  HostTensor dq(c_.dtype, q.shape()), dk(c_.dtype, k.shape()), dv(c_.dtype, v.shape());
  dq.poison();
  dk.poison();
  dv.poison();
  const BwdParams params = bwd_params(dq.view(), dk.view(), dv.view(), backend);
  const Status st = runner ? runner(params) : bwd(params);
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

namespace {

// Largest L2 norm and largest |element| of the head_dim vectors of t; NaN vectors (keys past
// seqused_k) are not part of the problem.
struct VectorBounds {
  double norm = 0, abs = 0;
};
VectorBounds vector_bounds(const HostTensor& t) {
  VectorBounds b;
  const int64_t dim = t.shape().back();
  const std::vector<float> x = t.to_float();
  for (int64_t v = 0; dim > 0 && v < t.numel() / dim; ++v) {
    double norm = 0, abs = 0;
    for (int64_t c = 0; c < dim; ++c) {
      norm += double(x[size_t(v * dim + c)]) * x[size_t(v * dim + c)];
      abs = std::max(abs, double(std::fabs(x[size_t(v * dim + c)])));
    }
    if (!std::isfinite(norm)) continue;
    b.norm = std::max(b.norm, std::sqrt(norm));
    b.abs = std::max(b.abs, abs);
  }
  return b;
}

}  // namespace

double AttentionRun::max_dot_magnitude(const HostTensor& rows, const HostTensor& keys) const {
  const int batch = c_.varlen() ? int(c_.varlen_q.size()) : c_.batch;
  const int64_t dim = rows.shape().back(), group = c_.heads_q / c_.heads_k;
  const std::vector<float> a = rows.to_float(), b = keys.to_float();
  const MaskParams mask{c_.window_left, c_.causal ? 0 : c_.window_right};
  double worst = 0;
  for (int s = 0; s < batch; ++s) {
    const int64_t sq = c_.varlen() ? c_.varlen_q[size_t(s)] : c_.seqlen_q;
    const int64_t stored_k = c_.varlen() ? c_.varlen_k[size_t(s)] : c_.seqlen_k;
    const int64_t sk = c_.seqused_k.empty() ? stored_k : c_.seqused_k[size_t(s)];
    const int64_t row_q = c_.varlen() ? cu_q.as<int32_t>()[s] : int64_t(s) * c_.seqlen_q;
    const int64_t row_k = c_.varlen() ? cu_k.as<int32_t>()[s] : int64_t(s) * c_.seqlen_k;
    for (int h = 0; h < c_.heads_q; ++h)
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j) {
          if (!key_visible(mask, i, j, sq, sk)) continue;
          const float* x = a.data() + ((row_q + i) * c_.heads_q + h) * dim;
          const float* y = b.data() + ((row_k + j) * c_.heads_k + h / group) * dim;
          double sum = 0;
          for (int64_t c = 0; c < dim; ++c) sum += std::fabs(double(x[c]) * y[c]);
          worst = std::max(worst, sum);
        }
  }
  return worst;
}

// The floor of one result: one unit in the last place at its magnitude (LSE: 8 units), and for
// dQ and dK the rounding noise of dS = P (dP - D), D = rowsum(dO O) with O stored in the input
// dtype: dP - D cancels (exactly where a row sees one key, nearly where its weight sits on one
// key), leaving about two units at sum_c |dO_c V_c| (dP and D each rounded there), times what dS
// multiplies (scale and K for dQ; scale and Q summed over the rows of a key, with random signs,
// for dK). fp16/bf16: the reference's roundings of S, P and dP to the input dtype exceed that
// noise, except in gradients that cancel to below it, where both sides are noise and the floor is
// the noise. float32: the reference rounds nothing coarser, so the noise is part of the floor;
// and each weight is exp2 of a float32 logit minus the float32 LSE, a relative error of about
// |logit| 2^-24 that the naive reference (which subtracts the row max first) does not make
// (tests/python/helpers.py takes the same term); with a softcap, dS scales by d logit / d s =
// scale (1 - t^2), t = tanh(s scale / cap), which turns the rounding of s (a unit at
// sum_c |q_c k_c|, the same in both) into a relative error of up to 2 (scale / cap) times that.
double AttentionRun::floor(Result which, const Errors& e) const {
  const bool is_lse = which == Result::Lse;
  double floor = rounding_floor(is_lse ? DType::F32 : c_.dtype, e.reference_max) * (is_lse ? 8 : 1);
  if (is_lse) return floor;
  const bool f32 = c_.dtype == DType::F32;
  const VectorBounds qb = vector_bounds(q), kb = vector_bounds(k), vb = vector_bounds(v);
  const double scale = std::fabs(c_.softmax_scale ? *c_.softmax_scale : 1.0 / std::sqrt(double(c_.head_dim)));
  const int64_t sq = c_.varlen() ? max_q_ : c_.seqlen_q, sk = c_.varlen() ? max_k_ : c_.seqlen_k;
  if (which == Result::Dq || which == Result::Dk) {
    const double unit = f32 ? 0x1p-24 : c_.dtype == DType::F16 ? 0x1p-11 : 0x1p-8;
    const double rows_per_key = double(sq * (c_.heads_q / c_.heads_k));
    const double ds_noise = 2 * unit * max_dot_magnitude(dout, v) / (1.0 - c_.dropout_p) * scale;
    const double noise = ds_noise * (which == Result::Dq ? kb.abs : qb.abs * std::sqrt(rows_per_key));
    if (f32) {
      floor += noise;
    } else if (e.reference_max < noise) {
      floor = std::max(floor, noise);
    }
  }
  if (!f32) return floor;
  double logit = scale * qb.norm * kb.norm;
  if (c_.softcap > 0) logit = std::min(logit, double(c_.softcap));
  if (c_.alibi) logit += 0.5 * double(sq + sk);  // slopes drawn in [0.05, 0.5]
  logit += std::log(double(std::max<int64_t>(sk, 1)));  // the LSE
  const double weight_rounding = 4 * 0x1p-24 * std::max(1.0, logit);
  const double magnitude = which == Result::Out ? vb.abs / (1.0 - c_.dropout_p) : e.reference_max;
  floor += weight_rounding * magnitude;
  if (c_.softcap > 0 && (which == Result::Dq || which == Result::Dk))
    floor += 2 * (scale / c_.softcap) * 0x1p-24 * max_dot_magnitude(q, k) * e.reference_max;
  return floor;
}

std::vector<AttentionCase> feature_sweep() {
  std::vector<AttentionCase> cases;
  auto add = [&](AttentionCase c) {
    c.seed = cases.size() + 1;
    cases.push_back(c);
  };
  // Sequence lengths that break kernels: 1, odd, ragged tails, sk < sq, off-by-one around 1024.
  const std::pair<int, int> lengths[] = {{1, 1},     {1, 17},     {17, 17},   {17, 1},    {113, 203},
                                         {203, 113}, {127, 513},  {64, 128},  {128, 64},  {1023, 1024},
                                         {1024, 1023}};
  for (auto [sq, sk] : lengths)
    for (bool causal : {false, true}) {
      AttentionCase c;
      c.seqlen_q = sq;
      c.seqlen_k = sk;
      c.causal = causal;
      const bool big = int64_t(sq) * sk > 100000;
      c.batch = big ? 1 : 2;
      c.heads_q = c.heads_k = big ? 1 : 2;
      add(c);
    }
  // Head dims, including odd multiples of 8, and a distinct value head dim.
  for (int d : {8, 32, 40, 64, 72, 96, 128, 136, 160, 192, 200, 224, 256}) {
    AttentionCase c;
    c.head_dim = d;
    c.seqlen_q = 77;
    c.seqlen_k = 150;
    c.causal = d % 16 == 0;
    add(c);
  }
  {
    AttentionCase c;
    c.head_dim = 128;
    c.head_dim_v = 64;
    c.seqlen_q = c.seqlen_k = 90;
    add(c);
  }
  // Dtypes.
  for (DType dt : {DType::F16, DType::F32}) {
    AttentionCase c;
    c.dtype = dt;
    c.seqlen_q = 100;
    c.seqlen_k = 140;
    add(c);
    c.causal = true;
    add(c);
  }
  // MHA / GQA / MQA.
  for (auto [hq, hk] : {std::pair{6, 6}, std::pair{6, 2}, std::pair{6, 1}, std::pair{8, 2}}) {
    AttentionCase c;
    c.batch = 3;
    c.heads_q = hq;
    c.heads_k = hk;
    c.seqlen_q = 70;
    c.seqlen_k = 130;
    c.causal = hk == 2;
    add(c);
  }
  // Every feature alone, and in pairs.
  AttentionCase base;
  base.seqlen_q = 96;
  base.seqlen_k = 160;
  base.heads_q = 4;
  base.heads_k = 2;
  auto with = [&](auto f) {
    AttentionCase c = base;
    f(c);
    add(c);
  };
  with([](AttentionCase& c) { c.window_left = 20; c.window_right = 10; });
  with([](AttentionCase& c) { c.window_left = 0; c.window_right = 0; });
  with([](AttentionCase& c) { c.window_left = 33; });
  with([](AttentionCase& c) { c.window_right = 5; });
  with([](AttentionCase& c) { c.causal = true; c.window_left = 40; });
  with([](AttentionCase& c) { c.softcap = 1.5f; });
  with([](AttentionCase& c) { c.softcap = 1.5f; c.causal = true; });
  with([](AttentionCase& c) { c.alibi = 1; });
  with([](AttentionCase& c) { c.alibi = 2; c.causal = true; });
  with([](AttentionCase& c) { c.alibi = 1; c.softcap = 2.f; });
  with([](AttentionCase& c) { c.dropout_p = 0.17f; });
  with([](AttentionCase& c) { c.dropout_p = 0.3f; c.causal = true; });
  with([](AttentionCase& c) { c.dropout_p = 0.1f; c.softcap = 2.f; c.alibi = 1; });
  with([](AttentionCase& c) { c.dropout_p = 0.2f; c.window_left = 30; c.window_right = 30; });
  with([](AttentionCase& c) { c.seqused_k = {100, 37}; });
  with([](AttentionCase& c) { c.seqused_k = {0, 160}; c.causal = true; });
  with([](AttentionCase& c) { c.num_splits = 3; });
  with([](AttentionCase& c) { c.num_splits = 4; c.causal = true; c.alibi = 1; });
  with([](AttentionCase& c) { c.num_splits = 0; c.seqlen_q = 1; c.seqlen_k = 700; });
  with([](AttentionCase& c) { c.num_splits = 16; c.seqlen_k = 64; c.softcap = 1.f; });  // empty splits
  // Varlen batches, with empty sequences on either side.
  with([](AttentionCase& c) { c.varlen_q = {30, 0, 77, 1}; c.varlen_k = {50, 12, 77, 0}; });
  with([](AttentionCase& c) { c.varlen_q = {30, 5, 77, 64}; c.varlen_k = {20, 0, 90, 64}; c.causal = true; });
  with([](AttentionCase& c) {
    c.varlen_q = {65, 17, 130};
    c.varlen_k = {65, 200, 3};
    c.window_left = 16;
    c.window_right = 0;
    c.dropout_p = 0.1f;
  });
  with([](AttentionCase& c) { c.varlen_q = {40, 70}; c.varlen_k = {60, 90}; c.seqused_k = {45, 90}; c.alibi = 2; });
  with([](AttentionCase& c) { c.varlen_q = {1, 1, 1}; c.varlen_k = {300, 5, 129}; c.num_splits = 0; });
  // A negative scale: the largest logit comes from the smallest score (kernels that keep their
  // running max on raw scores must not take this case).
  with([](AttentionCase& c) { c.softmax_scale = -0.125f; });
  with([](AttentionCase& c) { c.head_dim = 128; c.causal = true; c.softmax_scale = -0.09f; });
  // The same at head dim 128 (two 64-column blocks in the FA3 kernels' shared-memory tiles).
  with([](AttentionCase& c) { c.head_dim = 128; c.varlen_q = {30, 0, 77, 130}; c.varlen_k = {50, 12, 200, 129}; c.causal = true; });
  with([](AttentionCase& c) { c.head_dim = 128; c.seqused_k = {100, 37}; });
  with([](AttentionCase& c) { c.head_dim = 128; c.varlen_q = {40, 70}; c.varlen_k = {60, 190}; c.seqused_k = {45, 131}; });
  // Large head dims over several key tiles (the FA3 kernels' 80- and 112-key tiles at d256/d192,
  // three and four column blocks), and d192 with a d128 value.
  with([](AttentionCase& c) { c.head_dim = 256; c.seqlen_q = 200; c.seqlen_k = 333; c.causal = true; });
  with([](AttentionCase& c) { c.head_dim = 256; c.softcap = 2.f; c.window_left = 70; });
  with([](AttentionCase& c) { c.head_dim = 256; c.varlen_q = {40, 150}; c.varlen_k = {90, 170}; c.seqused_k = {81, 170}; });
  with([](AttentionCase& c) { c.head_dim = 192; c.head_dim_v = 128; c.seqlen_q = 150; c.seqlen_k = 301; c.causal = true; });
  with([](AttentionCase& c) { c.head_dim = 192; c.alibi = 1; c.seqused_k = {113, 160}; });
  with([](AttentionCase& c) { c.head_dim = 192; c.seqlen_k = 250; c.varlen_q = {70, 1}; c.varlen_k = {250, 113}; });
  with([](AttentionCase& c) { c.head_dim = 96; c.causal = true; c.window_left = 50; });
  // Head dims whose 16-byte chunks per row do not divide the FA2 loader's 128 threads (12, 20, 24,
  // 28 chunks), with dropout, split-KV, fp16 and softcap; and d32.
  with([](AttentionCase& c) { c.head_dim = 96; c.dropout_p = 0.15f; c.causal = true; });
  with([](AttentionCase& c) { c.head_dim = 160; c.num_splits = 3; c.alibi = 1; });
  with([](AttentionCase& c) { c.head_dim = 224; c.dtype = DType::F16; c.causal = true; c.softcap = 2.f; });
  with([](AttentionCase& c) { c.head_dim = 192; c.dropout_p = 0.1f; c.varlen_q = {70, 26}; c.varlen_k = {90, 160}; });
  with([](AttentionCase& c) { c.head_dim = 32; c.dropout_p = 0.2f; c.window_left = 40; c.window_right = 8; });
  return cases;
}

AttentionCase fp8_case(int batch, int heads_q, int heads_k, int head_dim, int seqlen_q, int seqlen_k) {
  AttentionCase c;
  c.dtype = DType::F8E4M3;
  c.batch = batch;
  c.heads_q = heads_q;
  c.heads_k = heads_k;
  c.head_dim = head_dim;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  return c;
}

std::vector<AttentionCase> fp8_sweep() {
  std::vector<AttentionCase> cases;
  AttentionCase base;
  base.dtype = DType::F8E4M3;
  base.seqlen_q = 96;
  base.seqlen_k = 160;
  base.heads_q = 4;
  base.heads_k = 2;
  auto with = [&](auto f) {
    AttentionCase c = base;
    f(c);
    c.seed = cases.size() + 101;
    cases.push_back(c);
  };
  with([](AttentionCase&) {});
  with([](AttentionCase& c) { c.causal = true; });
  with([](AttentionCase& c) { c.seqlen_q = 1; c.seqlen_k = 1; });
  with([](AttentionCase& c) { c.seqlen_q = 203; c.seqlen_k = 113; c.causal = true; });
  for (int d : {64, 128, 192, 256}) with([d](AttentionCase& c) { c.head_dim = d; c.causal = d == 128; });
  with([](AttentionCase& c) { c.head_dim = 192; c.head_dim_v = 128; });
  with([](AttentionCase& c) { c.batch = 3; c.heads_q = 6; c.heads_k = 1; });          // MQA
  with([](AttentionCase& c) { c.batch = 3; c.heads_q = 8; c.heads_k = 2; c.causal = true; });
  with([](AttentionCase& c) { c.heads_q = c.heads_k = 3; });                          // MHA
  with([](AttentionCase& c) { c.window_left = 20; c.window_right = 10; });
  with([](AttentionCase& c) { c.causal = true; c.window_left = 40; });
  with([](AttentionCase& c) { c.softcap = 1.5f; });
  with([](AttentionCase& c) { c.softcap = 2.f; c.causal = true; c.head_dim = 128; });
  with([](AttentionCase& c) { c.alibi = 2; c.causal = true; });
  with([](AttentionCase& c) { c.seqused_k = {100, 37}; });
  with([](AttentionCase& c) { c.num_splits = 3; });
  with([](AttentionCase& c) { c.num_splits = 4; c.causal = true; c.softcap = 1.f; });
  with([](AttentionCase& c) { c.num_splits = 0; c.seqlen_q = 1; c.seqlen_k = 700; c.heads_q = 8; });  // pack-GQA
  with([](AttentionCase& c) { c.varlen_q = {30, 0, 77, 1}; c.varlen_k = {50, 12, 77, 0}; });
  with([](AttentionCase& c) { c.varlen_q = {30, 5, 77, 64}; c.varlen_k = {20, 0, 90, 64}; c.causal = true; });
  with([](AttentionCase& c) { c.varlen_q = {40, 70}; c.varlen_k = {60, 190}; c.seqused_k = {45, 131}; c.num_splits = 2; });
  with([](AttentionCase& c) { c.varlen_q = {1, 1, 1}; c.varlen_k = {300, 5, 129}; c.num_splits = 0; c.head_dim = 128; });
  with([](AttentionCase& c) { c.softmax_scale = -0.125f; });
  return cases;
}

// The floor covers the final rounding of an output to its dtype: one unit in the last place at
// the output's magnitude.
double rounding_floor(DType dtype, double magnitude) {
  const double eps = dtype == DType::BF16 ? 0x1p-8 : dtype == DType::F16 ? 0x1p-11 : 0x1p-22;
  return eps * std::max(1.0, magnitude);
}

void expect_within(const Errors& e, double factor, double floor, const std::string& what) {
  EXPECT_LE(e.fast, factor * e.same_precision + floor)
      << what << ": error " << e.fast << " vs same-precision reference error " << e.same_precision
      << " (max |ref| " << e.reference_max << ")";
}

}  // namespace flashattn::test
