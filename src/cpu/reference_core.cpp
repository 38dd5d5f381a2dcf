// One head of naive attention, written once for both arithmetics: Acc = double is the ground
// truth (HeadMath::input_precision == false), Acc = float with the rounding hooks of Rounding
// emulates a framework computing in the input dtype.
#include "cpu/reference_core.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/element_io.h"

namespace flashattn::cpu::reference {
namespace {

// Where the emulated framework rounds its intermediates; identity in double.
template <typename Acc>
struct Rounding {
  HeadMath math;
  Acc score(Acc x) const {
    if constexpr (std::is_same_v<Acc, float>) return round_to(math.score_dtype, x);
    return x;
  }
  Acc prob(Acc x) const {
    if constexpr (std::is_same_v<Acc, float>) return round_to(math.prob_dtype, x);
    return x;
  }
};

template <typename Acc>
Acc dot(const double* a, const double* b, int64_t n) {
  Acc sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += Acc(a[i]) * Acc(b[i]);
  return sum;
}

// The softmax of one head, kept whole: the reference materialises everything.
struct Softmax {
  std::vector<uint8_t> visible;     // [sq][sk]
  std::vector<double> prob;         // P before dropout, 0 where masked
  std::vector<double> prob_drop;    // P * keep / (1 - p) (= prob without dropout)
  std::vector<double> grad_factor;  // d logit / d s
  std::vector<double> lse;          // [sq]
};

template <typename Acc>
Softmax compute_softmax(const HeadProblem& p) {
  const Rounding<Acc> round{p.math};
  const int64_t sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  Softmax sm;
  sm.visible.assign(size_t(sq * sk), 0);
  sm.prob.assign(size_t(sq * sk), 0.0);
  sm.grad_factor.assign(size_t(sq * sk), 0.0);
  sm.lse.assign(size_t(sq), -std::numeric_limits<double>::infinity());
  std::vector<Acc> logits(static_cast<size_t>(sk));

  const Acc scale = Acc(p.score.scale), cap = Acc(p.score.softcap);
  for (int64_t i = 0; i < sq; ++i) {
    Acc row_max = -std::numeric_limits<Acc>::infinity();
    bool any_visible = false;
    for (int64_t j = 0; j < sk; ++j) {
      if (!key_visible(p.mask, i, j, sq, sk)) continue;
      const size_t ij = size_t(i * sk + j);
      sm.visible[ij] = 1;
      any_visible = true;
      const Acc s = round.score(dot<Acc>(p.q + i * d, p.k + j * d, d));
      // score.h's logit (s * scale, or cap * tanh(s * scale / cap)) and its derivative in s.
      Acc logit, factor;
      if (p.score.softcap > 0.f) {
        const Acc t = std::tanh(s * (scale / cap));
        logit = cap * t;
        factor = scale * (Acc(1) - t * t);
      } else {
        logit = s * scale;
        factor = scale;
      }
      if (p.alibi_slope != 0.f) {
        const int64_t dist = i + sk - sq - j;
        logit += -Acc(p.alibi_slope) * Acc(dist < 0 ? -dist : dist);
      }
      logit = round.score(logit);
      logits[size_t(j)] = logit;
      sm.grad_factor[ij] = double(factor);
      if (logit > row_max) row_max = logit;
    }
    if (!any_visible) continue;  // P = 0, lse = -inf
    Acc sum = 0;
    for (int64_t j = 0; j < sk; ++j)
      if (sm.visible[size_t(i * sk + j)]) sum += std::exp(logits[size_t(j)] - row_max);
    for (int64_t j = 0; j < sk; ++j) {
      const size_t ij = size_t(i * sk + j);
      if (sm.visible[ij]) sm.prob[ij] = double(round.prob(std::exp(logits[size_t(j)] - row_max) / sum));
    }
    sm.lse[size_t(i)] = double(row_max + std::log(sum));
  }

  sm.prob_drop = sm.prob;
  if (p.dropout_p > 0.f) {
    const Acc keep_scale = Acc(1) / (Acc(1) - Acc(p.dropout_p));
    for (size_t ij = 0; ij < sm.prob.size(); ++ij)
      sm.prob_drop[ij] = p.keep[ij] ? double(round.prob(Acc(sm.prob[ij]) * keep_scale)) : 0.0;
  }
  return sm;
}

// out = P_drop . V with Acc accumulation (left unrounded: the caller's store rounds it).
template <typename Acc>
std::vector<double> attention_output(const HeadProblem& p, const Softmax& sm) {
  const int64_t sq = p.seqlen_q, sk = p.seqlen_k, dv = p.head_dim_v;
  std::vector<double> out(size_t(sq * dv), 0.0);
  std::vector<Acc> acc(static_cast<size_t>(dv));
  for (int64_t i = 0; i < sq; ++i) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int64_t j = 0; j < sk; ++j) {
      const size_t ij = size_t(i * sk + j);
      if (!sm.visible[ij]) continue;
      const Acc w = Acc(sm.prob_drop[ij]);
      const double* vj = p.v + j * dv;
      for (int64_t c = 0; c < dv; ++c) acc[size_t(c)] += w * Acc(vj[c]);
    }
    for (int64_t c = 0; c < dv; ++c) out[size_t(i * dv + c)] = double(acc[size_t(c)]);
  }
  return out;
}

template <typename Acc>
HeadForward forward_impl(const HeadProblem& p) {
  Softmax sm = compute_softmax<Acc>(p);
  return {attention_output<Acc>(p, sm), std::move(sm.lse)};
}

template <typename Acc>
HeadGradients backward_impl(const HeadProblem& p, const double* dout) {
  const Rounding<Acc> round{p.math};
  const int64_t sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim, dv = p.head_dim_v;
  const Softmax sm = compute_softmax<Acc>(p);
  const std::vector<double> out = attention_output<Acc>(p, sm);
  const bool dropout = p.dropout_p > 0.f;
  const Acc keep_scale = dropout ? Acc(1) / (Acc(1) - Acc(p.dropout_p)) : Acc(1);

  std::vector<Acc> dq(size_t(sq * d), 0), dk(size_t(sk * d), 0), dvv(size_t(sk * dv), 0);
  for (int64_t i = 0; i < sq; ++i) {
    const double* dout_i = dout + i * dv;
    // D = rowsum(dO * O), with O as the emulated framework holds it (in the input dtype).
    Acc row_dot = 0;
    for (int64_t c = 0; c < dv; ++c) row_dot += Acc(dout_i[c]) * round.prob(Acc(out[size_t(i * dv + c)]));
    for (int64_t j = 0; j < sk; ++j) {
      const size_t ij = size_t(i * sk + j);
      if (!sm.visible[ij]) continue;
      // dV += P_drop^T dO
      const Acc p_drop = Acc(sm.prob_drop[ij]);
      for (int64_t c = 0; c < dv; ++c) dvv[size_t(j * dv + c)] += p_drop * Acc(dout_i[c]);
      // dP = (dO V^T) * keep / (1 - p)
      Acc dp = round.score(dot<Acc>(dout_i, p.v + j * dv, dv));
      if (dropout) dp = p.keep[ij] ? round.score(dp * keep_scale) : Acc(0);
      // dS = P * (dP - D), then through d logit / d s (ALiBi does not depend on s)
      const Acc ds = round.score(Acc(sm.prob[ij]) * (dp - row_dot));
      const Acc ds_s = round.score(ds * Acc(sm.grad_factor[ij]));
      const double* qi = p.q + i * d;
      const double* kj = p.k + j * d;
      for (int64_t c = 0; c < d; ++c) {
        dq[size_t(i * d + c)] += ds_s * Acc(kj[c]);
        dk[size_t(j * d + c)] += ds_s * Acc(qi[c]);
      }
    }
  }
  HeadGradients g;
  g.dq.assign(dq.begin(), dq.end());
  g.dk.assign(dk.begin(), dk.end());
  g.dv.assign(dvv.begin(), dvv.end());
  return g;
}

}  // namespace

HeadForward head_forward(const HeadProblem& problem) {
  return problem.math.input_precision ? forward_impl<float>(problem) : forward_impl<double>(problem);
}

HeadGradients head_backward(const HeadProblem& problem, const double* dout) {
  return problem.math.input_precision ? backward_impl<float>(problem, dout)
                                      : backward_impl<double>(problem, dout);
}

float narrow_for_store(double x, DType dtype) {
  const float nearest = float(x);
  if (dtype == DType::F32 || std::isnan(x) || double(nearest) == x) return nearest;
  // Round to odd: truncate toward zero, then force the last mantissa bit on (x was inexact).
  const float truncated = std::fabs(double(nearest)) > std::fabs(x) ? std::nextafter(nearest, 0.f) : nearest;
  uint32_t bits;
  std::memcpy(&bits, &truncated, 4);
  bits |= 1u;
  float odd;
  std::memcpy(&odd, &bits, 4);
  return odd;
}

}  // namespace flashattn::cpu::reference
