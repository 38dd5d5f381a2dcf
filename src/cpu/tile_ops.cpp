#include "cpu/tile_ops.h"

#include <algorithm>

#include "common/philox.h"
#include "common/score.h"
#include "cpu/element_io.h"
#include "cpu/simd.h"

namespace flashattn::cpu {

void load_tile(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0, int rows,
               int64_t dim, float* dst, int64_t ld, int pad_rows) {
  for (int r = 0; r < rows; ++r) load_row(view.data, view.offset(b, row0 + r, head), dtype, dim, dst + r * ld);
  for (int r = rows; r < pad_rows; ++r) std::memset(dst + r * ld, 0, sizeof(float) * size_t(dim));
}

// Converts kTransposeRows rows at a time into row_buffer, then writes them out column by
// column: each store run is kTransposeRows contiguous floats instead of one float per row
// (scattering single floats with a stride of a whole tile row was most of this function's time).
void load_tile_transposed(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0,
                          int rows, int64_t dim, float* dst, int64_t ld, float* row_buffer) {
  for (int r0 = 0; r0 < rows; r0 += kTransposeRows) {
    const int n = std::min(kTransposeRows, rows - r0);
    for (int r = 0; r < n; ++r)
      load_row(view.data, view.offset(b, row0 + r0 + r, head), dtype, dim, row_buffer + r * dim);
    for (int64_t c = 0; c < dim; ++c) {
      float* dst_c = dst + c * ld + r0;
      if (n == kTransposeRows) {
        for (int r = 0; r < kTransposeRows; ++r) dst_c[r] = row_buffer[r * dim + c];
      } else {
        for (int r = 0; r < n; ++r) dst_c[r] = row_buffer[r * dim + c];
      }
    }
  }
  for (int64_t c = 0; c < dim; ++c)
    for (int64_t r = rows; r < ld; ++r) dst[c * ld + r] = 0.f;
}

void scale_tile(float* x, int64_t rows, int64_t cols, int64_t ld, float factor) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
    for (int64_t c = 0; c < cols; ++c) xr[c] *= factor;
  }
}

namespace {

using simd::VecF;
using simd::kLanes;

// The register block of the micro-kernel: kRows rows x kVecs vectors of C stay in registers for
// the whole k loop, so every step loads kVecs vectors of B and kRows scalars of A for
// kRows * kVecs FMAs (the 4-row loops before re-read and re-wrote C at every k).
inline constexpr int kVecs = simd::kRegisters >= 32 ? 4 : 2;
inline constexpr int kRows = simd::kRegisters >= 32 ? 6 : 4;
inline constexpr int kPanel = kVecs * kLanes;  // columns of C per block

// A, read as a[i * row_stride + k * k_stride]: row-major (k_stride 1) or transposed (row_stride 1).
struct MatA {
  const float* data;
  int64_t row_stride, k_stride;
  float at(int64_t i, int64_t k) const { return data[i * row_stride + k * k_stride]; }
};

// C[0..R) x [0..V * kLanes) (+)= A[0..R) x B, B row-major over kdim rows.
template <int R, int V>
void block_kernel(MatA a, int64_t kdim, const float* b, int64_t ldb, float* c, int64_t ldc,
                  bool accumulate) {
  VecF acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = accumulate ? simd::load(c + r * ldc + v * kLanes) : VecF{};
  for (int64_t k = 0; k < kdim; ++k) {
    VecF bk[V];
    for (int v = 0; v < V; ++v) bk[v] = simd::load(b + k * ldb + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const VecF ar = simd::broadcast(a.at(r, k));
      for (int v = 0; v < V; ++v) acc[r][v] += ar * bk[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) simd::store(c + r * ldc + v * kLanes, acc[r][v]);
}

// Columns that do not fill a vector (ragged key tiles, head dims that are not a multiple of it).
void scalar_columns(MatA a, int rows, int64_t kdim, const float* b, int64_t ldb, int cols, float* c,
                    int64_t ldc, bool accumulate) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      float sum = accumulate ? c[i * ldc + j] : 0.f;
      for (int64_t k = 0; k < kdim; ++k) sum += a.at(i, k) * b[k * ldb + j];
      c[i * ldc + j] = sum;
    }
}

// The last rows % kRows rows of a strip, in one block of their own height.
template <int V, int R = kRows - 1>
void leftover_rows(int left, MatA a, int64_t kdim, const float* b, int64_t ldb, float* c,
                   int64_t ldc, bool accumulate) {
  if constexpr (R > 0) {
    if (left == R) return block_kernel<R, V>(a, kdim, b, ldb, c, ldc, accumulate);
    leftover_rows<V, R - 1>(left, a, kdim, b, ldb, c, ldc, accumulate);
  }
}

// One column strip of V vectors over all rows: kRows at a time, then the leftover rows.
template <int V>
void column_strip(MatA a, int rows, int64_t kdim, const float* b, int64_t ldb, float* c,
                  int64_t ldc, bool accumulate) {
  int i = 0;
  for (; i + kRows <= rows; i += kRows)
    block_kernel<kRows, V>({a.data + i * a.row_stride, a.row_stride, a.k_stride}, kdim, b, ldb,
                           c + i * ldc, ldc, accumulate);
  if (i < rows)
    leftover_rows<V>(rows - i, {a.data + i * a.row_stride, a.row_stride, a.k_stride}, kdim, b, ldb,
                     c + i * ldc, ldc, accumulate);
}

// C (rows x cols) (+)= A (rows x kdim) * B (kdim x cols, row-major).
void gemm(MatA a, int rows, int64_t kdim, const float* b, int64_t ldb, int cols, float* c,
          int64_t ldc, bool accumulate) {
  int j = 0;
  for (; j + kPanel <= cols; j += kPanel) column_strip<kVecs>(a, rows, kdim, b + j, ldb, c + j, ldc, accumulate);
  for (; j + kLanes <= cols; j += kLanes) column_strip<1>(a, rows, kdim, b + j, ldb, c + j, ldc, accumulate);
  if (j < cols) scalar_columns(a, rows, kdim, b + j, ldb, cols - j, c + j, ldc, accumulate);
}

}  // namespace

void matmul_kmajor(const float* a, int64_t lda, int rows, int64_t kdim, const float* bt, int64_t ldb,
                   int cols, float* c, int64_t ldc) {
  gemm({a, lda, 1}, rows, kdim, bt, ldb, cols, c, ldc, /*accumulate=*/false);
}

void matmul_accumulate(const float* p, int64_t ldp, int rows, int cols, const float* b, int64_t ldb,
                       int64_t n, float* c, int64_t ldc) {
  gemm({p, ldp, 1}, rows, cols, b, ldb, int(n), c, ldc, /*accumulate=*/true);
}

void matmul_accumulate_at(const float* p, int64_t ldp, int rows, int cols, const float* b,
                          int64_t ldb, int64_t n, float* c, int64_t ldc) {
  gemm({p, 1, ldp}, cols, rows, b, ldb, int(n), c, ldc, /*accumulate=*/true);
}

namespace {

bool fully_visible(const AttnProblem& problem, const TileCoords& tile) {
  return tile_fully_visible(problem.mask, tile.row0, tile.row0 + tile.rows, tile.key0, tile.key0 + tile.keys,
                            tile.seqlen_q, tile.seqlen_k);
}

}  // namespace

void scores_to_logits(const AttnProblem& problem, const TileCoords& tile, float* s, int64_t lds,
                      float* grad_factor) {
  const ScoreParams score = problem.score;
  const float slope = problem.alibi_slope(tile.batch, tile.head);
  const bool full = fully_visible(problem, tile);
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

void zero_hidden(const AttnProblem& problem, const TileCoords& tile, float* p, int64_t ldp) {
  if (fully_visible(problem, tile)) return;
  for (int i = 0; i < tile.rows; ++i)
    for (int j = 0; j < tile.keys; ++j)
      if (!key_visible(problem.mask, tile.row0 + i, tile.key0 + j, tile.seqlen_q, tile.seqlen_k)) p[i * ldp + j] = 0.f;
}

bool all_finite(const float* x, int rows, int64_t cols, int64_t ld) {
  bool finite = true;
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) finite &= std::isfinite(x[r * ld + c]);
  return finite;
}

// The mask shows each row a contiguous key range (and each key a contiguous row range), so the
// visible pairs of one row (or one key) form a single slice of the tile.
void matmul_accumulate_visible(const AttnProblem& problem, const TileCoords& tile, const float* p, int64_t ldp,
                               const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc) {
  if (fully_visible(problem, tile) || all_finite(b, tile.keys, n, ldb))
    return matmul_accumulate(p, ldp, tile.rows, tile.keys, b, ldb, n, c, ldc);
  for (int i = 0; i < tile.rows; ++i) {
    const KeyRange keys = visible_keys(problem.mask, tile.row0 + i, tile.row0 + i + 1, tile.seqlen_q, tile.seqlen_k);
    const int64_t begin = std::max(keys.begin, tile.key0) - tile.key0;
    const int64_t end = std::min(keys.end, tile.key0 + tile.keys) - tile.key0;
    if (begin < end)
      matmul_accumulate(p + i * ldp + begin, ldp, 1, int(end - begin), b + begin * ldb, ldb, n, c + i * ldc, ldc);
  }
}

void matmul_accumulate_at_visible(const AttnProblem& problem, const TileCoords& tile, const float* p, int64_t ldp,
                                  const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc) {
  if (fully_visible(problem, tile) || all_finite(b, tile.rows, n, ldb))
    return matmul_accumulate_at(p, ldp, tile.rows, tile.keys, b, ldb, n, c, ldc);
  for (int j = 0; j < tile.keys; ++j) {
    const int64_t key = tile.key0 + j;
    const KeyRange rows = visible_rows(problem.mask, key, key + 1, tile.seqlen_q, tile.seqlen_k);
    const int64_t begin = std::max(rows.begin, tile.row0) - tile.row0;
    const int64_t end = std::min(rows.end, tile.row0 + tile.rows) - tile.row0;
    if (begin < end)
      matmul_accumulate_at(p + begin * ldp + j, ldp, int(end - begin), 1, b + begin * ldb, ldb, n, c + j * ldc, ldc);
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
