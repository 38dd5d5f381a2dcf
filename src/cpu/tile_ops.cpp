#include "cpu/tile_ops.h"

#include "common/philox.h"
#include "common/score.h"
#include "cpu/element_io.h"

namespace flashattn::cpu {

void load_tile(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0, int rows,
               int64_t dim, float* dst, int64_t ld, int pad_rows) {
  for (int r = 0; r < rows; ++r) load_row(view.data, view.offset(b, row0 + r, head), dtype, dim, dst + r * ld);
  for (int r = rows; r < pad_rows; ++r) std::memset(dst + r * ld, 0, sizeof(float) * size_t(dim));
}

void load_tile_transposed(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0,
                          int rows, int64_t dim, float* dst, int64_t ld, float* row_buffer) {
  for (int r = 0; r < rows; ++r) {
    load_row(view.data, view.offset(b, row0 + r, head), dtype, dim, row_buffer);
    for (int64_t c = 0; c < dim; ++c) dst[c * ld + r] = row_buffer[c];
  }
  for (int64_t c = 0; c < dim; ++c)
    for (int64_t r = rows; r < ld; ++r) dst[c * ld + r] = 0.f;
}

void matmul_kmajor(const float* a, int64_t lda, int rows, int64_t kdim, const float* bt, int64_t ldb,
                   int cols, float* c, int64_t ldc) {
  int i = 0;
  // Four rows at a time: each bt row is loaded once for four accumulator rows.
  for (; i + 4 <= rows; i += 4) {
    float* c0 = c + (i + 0) * ldc;
    float* c1 = c + (i + 1) * ldc;
    float* c2 = c + (i + 2) * ldc;
    float* c3 = c + (i + 3) * ldc;
    for (int j = 0; j < cols; ++j) c0[j] = c1[j] = c2[j] = c3[j] = 0.f;
    for (int64_t k = 0; k < kdim; ++k) {
      const float a0 = a[(i + 0) * lda + k], a1 = a[(i + 1) * lda + k];
      const float a2 = a[(i + 2) * lda + k], a3 = a[(i + 3) * lda + k];
      const float* bk = bt + k * ldb;
      for (int j = 0; j < cols; ++j) {
        const float bv = bk[j];
        c0[j] += a0 * bv;
        c1[j] += a1 * bv;
        c2[j] += a2 * bv;
        c3[j] += a3 * bv;
      }
    }
  }
  for (; i < rows; ++i) {
    float* ci = c + i * ldc;
    for (int j = 0; j < cols; ++j) ci[j] = 0.f;
    for (int64_t k = 0; k < kdim; ++k) {
      const float ak = a[i * lda + k];
      const float* bk = bt + k * ldb;
      for (int j = 0; j < cols; ++j) ci[j] += ak * bk[j];
    }
  }
}

void matmul_accumulate(const float* p, int64_t ldp, int rows, int cols, const float* b, int64_t ldb,
                       int64_t n, float* c, int64_t ldc) {
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    float* c0 = c + (i + 0) * ldc;
    float* c1 = c + (i + 1) * ldc;
    float* c2 = c + (i + 2) * ldc;
    float* c3 = c + (i + 3) * ldc;
    for (int j = 0; j < cols; ++j) {
      const float p0 = p[(i + 0) * ldp + j], p1 = p[(i + 1) * ldp + j];
      const float p2 = p[(i + 2) * ldp + j], p3 = p[(i + 3) * ldp + j];
      if (p0 == 0.f && p1 == 0.f && p2 == 0.f && p3 == 0.f) continue;  // masked or dropped
      const float* bj = b + j * ldb;
      for (int64_t x = 0; x < n; ++x) {
        const float bv = bj[x];
        c0[x] += p0 * bv;
        c1[x] += p1 * bv;
        c2[x] += p2 * bv;
        c3[x] += p3 * bv;
      }
    }
  }
  for (; i < rows; ++i) {
    float* ci = c + i * ldc;
    for (int j = 0; j < cols; ++j) {
      const float pj = p[i * ldp + j];
      if (pj == 0.f) continue;
      const float* bj = b + j * ldb;
      for (int64_t x = 0; x < n; ++x) ci[x] += pj * bj[x];
    }
  }
}

void matmul_accumulate_at(const float* p, int64_t ldp, int rows, int cols, const float* b,
                          int64_t ldb, int64_t n, float* c, int64_t ldc) {
  int j = 0;
  for (; j + 4 <= cols; j += 4) {
    float* c0 = c + (j + 0) * ldc;
    float* c1 = c + (j + 1) * ldc;
    float* c2 = c + (j + 2) * ldc;
    float* c3 = c + (j + 3) * ldc;
    for (int i = 0; i < rows; ++i) {
      const float* pi = p + i * ldp + j;
      const float p0 = pi[0], p1 = pi[1], p2 = pi[2], p3 = pi[3];
      if (p0 == 0.f && p1 == 0.f && p2 == 0.f && p3 == 0.f) continue;
      const float* bi = b + i * ldb;
      for (int64_t x = 0; x < n; ++x) {
        const float bv = bi[x];
        c0[x] += p0 * bv;
        c1[x] += p1 * bv;
        c2[x] += p2 * bv;
        c3[x] += p3 * bv;
      }
    }
  }
  for (; j < cols; ++j) {
    float* cj = c + j * ldc;
    for (int i = 0; i < rows; ++i) {
      const float pij = p[i * ldp + j];
      if (pij == 0.f) continue;
      const float* bi = b + i * ldb;
      for (int64_t x = 0; x < n; ++x) cj[x] += pij * bi[x];
    }
  }
}

void scores_to_logits(const AttnProblem& problem, const TileCoords& tile, float* s, int64_t lds,
                      float* grad_factor) {
  const ScoreParams score = problem.score;
  const float slope = problem.alibi_slope(tile.batch, tile.head);
  const bool full = tile_fully_visible(problem.mask, tile.row0, tile.row0 + tile.rows, tile.key0,
                                       tile.key0 + tile.keys, tile.seqlen_q, tile.seqlen_k);
  for (int i = 0; i < tile.rows; ++i) {
    float* si = s + i * lds;
    float* gi = grad_factor != nullptr ? grad_factor + i * lds : nullptr;
    const int64_t row = tile.row0 + i;
    if (score.softcap > 0.f) {
      for (int j = 0; j < tile.keys; ++j) {
        const float capped = score_to_logit(score, si[j]);
        if (gi != nullptr) gi[j] = logit_grad_factor(score, capped);
        si[j] = capped;
      }
    } else {
      for (int j = 0; j < tile.keys; ++j) si[j] *= score.scale;
      if (gi != nullptr)
        for (int j = 0; j < tile.keys; ++j) gi[j] = score.scale;
    }
    if (slope != 0.f)
      for (int j = 0; j < tile.keys; ++j)
        si[j] += alibi_bias(slope, row, tile.key0 + j, tile.seqlen_q, tile.seqlen_k);
    if (!full)  // only tiles crossing a mask boundary pay for per-element checks
      for (int j = 0; j < tile.keys; ++j)
        if (!key_visible(problem.mask, row, tile.key0 + j, tile.seqlen_q, tile.seqlen_k))
          si[j] = -INFINITY;
  }
}

void apply_dropout(const AttnProblem& problem, const TileCoords& tile, float* p, int64_t ldp) {
  const uint32_t threshold = dropout_threshold(problem.dropout_p);
  const float keep_scale = 1.f / (1.f - problem.dropout_p);
  for (int i = 0; i < tile.rows; ++i) {
    float* pi = p + i * ldp;
    const int64_t row = tile.row0 + i;
    for (int j = 0; j < tile.keys;) {
      const int64_t key = tile.key0 + j;
      // One Philox call yields the words of four consecutive keys.
      const Philox4 bits = dropout_bits(problem.dropout_seed, problem.dropout_offset, tile.batch,
                                        problem.heads_q, tile.head, row, key);
      for (int w = int(key & 3); w < 4 && j < tile.keys; ++w, ++j)
        pi[j] = philox_word(bits, w) >= threshold ? pi[j] * keep_scale : 0.f;
    }
  }
}

}  // namespace flashattn::cpu
