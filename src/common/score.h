// From a raw dot product q.k to the logit the softmax sees, and its derivative for the backward:
//   logit = s * scale                        (no softcap)
//   logit = cap * tanh(s * scale / cap)      (softcap > 0)
//   logit += -slope * |i + seqlen_k - seqlen_q - j|   (ALiBi)
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct ScoreParams {
  float scale = 1.f;
  float softcap = 0.f;  // 0 = off
};

FA_HD float alibi_bias(float slope, int64_t row, int64_t key, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t dist = row + seqlen_k - seqlen_q - key;
  return -slope * float(dist < 0 ? -dist : dist);
}

// alibi_bias in 32 bits for kernels (rows and keys below 2^30 each; shift = seqlen_k - seqlen_q):
// 64-bit distances cost them register pairs and a 64-bit conversion per element.
FA_HD float alibi_bias_32(float slope, int row, int key, int shift) {
  const int dist = row + shift - key;
  return -slope * float(dist < 0 ? -dist : dist);
}

FA_HD float score_to_logit(ScoreParams p, float s) {
  if (p.softcap > 0.f) return p.softcap * tanhf(s * (p.scale / p.softcap));
  return s * p.scale;
}

// d logit / d s, given the logit before ALiBi was added (the softcap output).
FA_HD float logit_grad_factor(ScoreParams p, float capped_logit) {
  if (p.softcap > 0.f) {
    const float t = capped_logit / p.softcap;
    return p.scale * (1.f - t * t);
  }
  return p.scale;
}

// score_to_logit and logit_grad_factor at once, with the divisions done once per call
// (score_factors): kernels apply this per element, where a division is a slow-path call.
struct ScoreFactors {
  float scale, softcap, scale_over_cap;
};
FA_HD ScoreFactors score_factors(ScoreParams p) {
  return {p.scale, p.softcap, p.softcap > 0.f ? p.scale / p.softcap : 0.f};
}
// tanhf as in score_to_logit: the backward's recomputed logits must be the forward's, whose LSE
// they are divided by (tanh.approx's absolute error, cap * 2^-11, is percents of P at a softcap
// of 50).
FA_HD float logit_with_grad(const ScoreFactors& f, float s, float* grad) {
  if (f.softcap > 0.f) {
    const float t = tanhf(s * f.scale_over_cap);
    *grad = f.scale * (1.f - t * t);
    return f.softcap * t;
  }
  *grad = f.scale;
  return s * f.scale;
}

}  // namespace flashattn
