// Score processing of the FA3 forward on a wgmma m64nN accumulator: logits, mask, online softmax.
// Accumulator register 4i + e of a thread holds row `group + 8 (e / 2)` of its warp's 16 rows and
// key `8i + 2 quad + e % 2` of the tile (group = lane / 4, quad = lane % 4); a quad shares each row.
//
// Units: plain scores (AttnProblem::plain_forward_scores: no softcap, no ALiBi, scale > 0) stay raw
// and the softmax scale is folded into the exp2 argument, one FFMA per element: p = exp2(s *
// scale_log2 - max). Otherwise the logit stage produces natural-log logits and scale_log2 =
// log2(e). The running max is kept in exp2 units (a score's max times scale_log2, rounded once),
// so that a max that does not move rescales by exactly 1: kept raw and scaled per tile, the
// factor was exp2 of the rounding error of max * scale_log2 (contracted into an FMA), up to
// 2^(1/8) per tile for logits of 10^6 (fp8 with large descales), compounding over the tiles.
#pragma once

#include <cmath>
#include <cstdint>

#include "arch/sm80/math.cuh"
#include "common/mask.h"
#include "common/problem.h"
#include "common/score.h"

namespace flashattn::fa3 {

constexpr float kLog2e = 1.4426950408889634f;

// Position of this thread's accumulator elements within the tile.
struct AccumulatorCoords {
  int row0;  // absolute query row of accumulator elements with e / 2 == 0 (the other row is + 8)
  int quad;
};

// Softcap, ALiBi or scale <= 0 (kGeneralScore): scores become natural-log logits. Compile-time, so
// the plain path has no per-element branch.
// `score`: the call's (fp8: its scale times the tile's q_descale k_descale).
template <bool kGeneralScore, int kRegs>
__device__ __forceinline__ void scores_to_logits(float (&s)[kRegs], const ScoreParams score, const AttnProblem& p, AccumulatorCoords at,
                                                 int key0, int64_t b, int64_t h, int sq, int sk) {
  if constexpr (kGeneralScore) {
    const float slope = p.alibi_slope(b, h);
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int row = at.row0 + 8 * ((i % 4) / 2);
      const int key = key0 + 8 * (i / 4) + 2 * at.quad + (i % 2);
      float x = score_to_logit(score, s[i]);
      if (slope != 0.f) x += alibi_bias(slope, row, key, sq, sk);
      s[i] = x;
    }
  }
}

// Sets the scores of accumulator row r (0: row0, 1: row0 + 8) to -inf outside the keys [begin, end)
// of the tile.
// kRelative: keys relative to the quad's first, so that each compare is against a constant (the
// widest fp8 tiles mask without spills that way; the general-score kernels spill with it).
template <bool kRelative = true, int kRegs>
__device__ __forceinline__ void mask_row_outside(float (&s)[kRegs], int r, int quad, int begin, int end) {
  if constexpr (kRelative) begin -= 2 * quad, end -= 2 * quad;
#pragma unroll
  for (int i = 0; i < kRegs; ++i)
    if ((i % 4) / 2 == r) {
      const int key = 8 * (i / 4) + (kRelative ? 0 : 2 * quad) + (i % 2);
      if (key < begin || key >= end) s[i] = -INFINITY;
    }
}

// Sets scores of invisible (row, key) pairs to -inf. Called only for tiles that need a mask; the
// visible keys of a row are one interval (common/mask.h), found once per row: in 32 bits with
// kNarrowIndex (the launch clamps the windows and takes query + key rows < 2^31 - 256), which the
// widest plain tiles need for their registers; the 64-bit form suits the general-score kernels'
// register allocation better.
template <bool kNarrowIndex, int kRegs>
__device__ __forceinline__ void mask_scores(float (&s)[kRegs], MaskParams m, AccumulatorCoords at, int key0, int sq, int sk) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = at.row0 + 8 * r;
    int begin, end;
    if constexpr (kNarrowIndex) {
      const RowKeys keys = row_keys_32(m, row, sq, sk);
      begin = keys.begin - key0, end = keys.end - key0;
    } else {
      const KeyRange keys = visible_keys(m, row, row + 1, sq, sk);
      begin = int(keys.begin) - key0, end = int(keys.end) - key0;
    }
    mask_row_outside<kNarrowIndex>(s, r, at.quad, begin, end);
  }
}

// The mask of a call without causal or window limits: only the keys past the sequence's end (in
// its last key tile), the same for every row.
template <int kRegs>
__device__ __forceinline__ void mask_keys_past_end(float (&s)[kRegs], AccumulatorCoords at, int key0, int sk) {
#pragma unroll
  for (int r = 0; r < 2; ++r) mask_row_outside(s, r, at.quad, 0, sk - key0);
}

// Online softmax update for one tile: new running max per row (exp2 units, see the top), the
// factor that rescales the running sum and O, and s replaced by exp2(s * scale_log2 - max +
// kPShift) (unnormalised P, times 2^kPShift: fp8's P keeps its small weights in e4m3's normal
// range). scale_log2 >= 0 (or NaN: every output NaN).
// kRescaleSlack > 0: a row's max moves only when the tile's exceeds it by more than kRescaleSlack
// (exp2 units: a factor 2^kRescaleSlack; FlashAttention-4's lazy rescale): P then stays below
// 2^(kPShift + kRescaleSlack), the running sum and O carry the same stale max, and most tiles
// rescale by exactly 1 (the caller skips it).
template <int kPShift = 0, float kRescaleSlack = 0.f, int kRegs>
__device__ __forceinline__ void softmax_update(float (&s)[kRegs], float (&row_max)[2], float (&row_sum)[2], float scale_log2,
                                               float (&rescale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kRegs; ++i)
      if ((i % 4) / 2 == r) tile_max = sm80::max_nan(tile_max, s[i]);
    tile_max = sm80::max_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = sm80::max_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    // (-inf stays -inf also when scale_log2 is 0.)
    const float tile_max_scaled = tile_max == -INFINITY ? -INFINITY : tile_max * scale_log2;
    float new_max = sm80::max_nan(row_max[r], tile_max_scaled);  // NaN in, NaN out (not a row that saw nothing)
    // (-inf + slack is -inf: a row's first visible tile always sets its max; NaN compares false.)
    if constexpr (kRescaleSlack > 0.f)
      if (new_max <= row_max[r] + kRescaleSlack) new_max = row_max[r];
    // A row with nothing visible yet keeps max -inf; subtracting 0 keeps its exponentials at 0.
    const float max_used = new_max == -INFINITY ? 0.f : new_max;
    rescale[r] = sm80::fast_exp2(row_max[r] - max_used);
    row_max[r] = new_max;
    const float offset = kPShift != 0 ? max_used - float(kPShift) : max_used;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kRegs; ++i)
      if ((i % 4) / 2 == r) {
        s[i] = sm80::fast_exp2(fmaf(s[i], scale_log2, -offset));
        sum += s[i];
      }
    row_sum[r] = row_sum[r] * rescale[r] + sum;
  }
}

// With kSkipOnes (the lazy rescale), a warp whose rows all rescale by 1 skips the multiplies.
template <bool kSkipOnes = false, int kRegs>
__device__ __forceinline__ void rescale_rows(float (&o)[kRegs], const float (&rescale)[2]) {
  if constexpr (kSkipOnes)
    if (!__any_sync(0xffffffffu, rescale[0] != 1.f || rescale[1] != 1.f)) return;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) o[i] *= rescale[(i % 4) / 2];
}

}  // namespace flashattn::fa3
