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

}  // namespace flashattn
