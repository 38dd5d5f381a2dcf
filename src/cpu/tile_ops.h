// The tile-level building blocks of the CPU FlashAttention path: tile loads, the small matrix
// products (written so the innermost loop runs over contiguous floats and vectorises), the score
// transform with masking, and a vectorisable exp2.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/mask.h"
#include "common/problem.h"
#include "cpu/simd.h"

namespace flashattn::cpu {

inline constexpr int kBlockM = 128;  // query rows per tile: each converted K/V tile serves more rows
inline constexpr int kBlockN = 128;  // keys per tile (128 measured ~5% faster forward than 64)

// 2^f for |f| <= 1/2 (Taylor series of e^(f ln2) to degree 7), for a float or a simd::VecF.
template <typename T>
inline T exp2_fraction(T f) {
  const T t = f * 0.693147180559945f;
  T p = t * (1.f / 5040.f) + 1.f / 720.f;
  p = p * t + 1.f / 120.f;
  p = p * t + 1.f / 24.f;
  p = p * t + 1.f / 6.f;
  p = p * t + 0.5f;
  p = p * t + 1.f;
  return p * t + 1.f;
}

// 2^x with ~1 ulp error for x <= 0; exactly 0 below -126 (so masked -inf logits give 0).
inline float exp2_tile(float x) {
  const bool underflow = x < -126.f;
  const bool is_nan = x != x;
  float xc = underflow ? -126.f : (x > 127.f ? 127.f : x);
  const float n = std::floor(xc + 0.5f);
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  const float r = underflow ? 0.f : exp2_fraction(xc - n) * scale;
  return is_nan ? x : r;
}

// exp2_tile on a vector, written with vector operations: GCC does not vectorise the scalar one
// (std::floor stays a call unless -fno-trapping-math). n is x rounded to nearest (ties to even,
// where the scalar rounds half up; both leave |x - n| <= 1/2).
inline simd::VecF exp2_tile(simd::VecF x) {
  using simd::VecF;
  using VecI = simd::VecI;
  const VecF xc = x < -126.f ? simd::broadcast(-126.f) : (x > 127.f ? simd::broadcast(127.f) : x);
  const VecF round_magic = simd::broadcast(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer
  const VecF n = (xc + round_magic) - round_magic;
  const VecI bits = (__builtin_convertvector(n, VecI) + 127) << 23;
  const VecF r = exp2_fraction(xc - n) * (VecF)bits;  // same-size vector cast: the bits as floats
  const VecF zero_or_r = x < -126.f ? VecF{} : r;
  return x != x ? x : zero_or_r;
}

inline constexpr float kLog2e = 1.4426950408889634f;

// x[j] = 2^(x[j] * log2(e) - shift_log2) for j < n: the softmax weights of a row of logits.
inline void exp2_shifted(float* x, int n, float shift_log2) {
  int j = 0;
  for (; j + simd::kLanes <= n; j += simd::kLanes)
    simd::store(x + j, exp2_tile(simd::load(x + j) * kLog2e - shift_log2));
  for (; j < n; ++j) x[j] = exp2_tile(x[j] * kLog2e - shift_log2);
}

// Loads rows [row0, row0 + rows) of (b, head) as float, row r at dst + r * ld; rows beyond
// `rows` up to `pad_rows` are zero-filled.
void load_tile(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0, int rows,
               int64_t dim, float* dst, int64_t ld, int pad_rows = 0);
// Same rows, stored transposed: element (r, c) at dst[c * ld + r]; columns rows..ld-1 zeroed.
// row_buffer holds kTransposeRows * dim floats.
inline constexpr int kTransposeRows = 16;
void load_tile_transposed(const RowsView& view, DType dtype, int64_t b, int64_t head, int64_t row0,
                          int rows, int64_t dim, float* dst, int64_t ld, float* row_buffer);

// x[r][c] *= factor for r < rows, c < cols: dequantises a loaded fp8 tile by its descale factor.
void scale_tile(float* x, int64_t rows, int64_t cols, int64_t ld, float factor);

// c[i][j] = sum_k a[i][k] * bt[k][j]      (a: rows x kdim, bt: kdim x cols, k-major)
void matmul_kmajor(const float* a, int64_t lda, int rows, int64_t kdim, const float* bt, int64_t ldb,
                   int cols, float* c, int64_t ldc);
// c[i][n] += sum_j p[i][j] * b[j][n]      (p: rows x cols, b: cols x n)
void matmul_accumulate(const float* p, int64_t ldp, int rows, int cols, const float* b, int64_t ldb,
                       int64_t n, float* c, int64_t ldc);
// c[j][n] += sum_i p[i][j] * b[i][n]      (the transpose of p times b)
void matmul_accumulate_at(const float* p, int64_t ldp, int rows, int cols, const float* b,
                          int64_t ldb, int64_t n, float* c, int64_t ldc);

// Where a tile sits in its sequence.
struct TileCoords {
  int64_t batch, head;       // head: query head
  int64_t row0, key0;        // first query row and first key of the tile
  int rows, keys;
  int64_t seqlen_q, seqlen_k;
};

// Turns raw dot products s[i][j] (i < rows, j < keys) into logits in place: scale or softcap,
// ALiBi, and -inf where the mask hides the key. With grad_factor, also stores d logit / d s.
void scores_to_logits(const AttnProblem& problem, const TileCoords& tile, float* s, int64_t lds,
                      float* grad_factor);

// Sets p[i][j] to 0 where the mask hides key key0 + j from row row0 + i (nothing to do on a fully
// visible tile): weights that must be exactly 0 even when a NaN row LSE or NaN dP made them NaN.
void zero_hidden(const AttnProblem& problem, const TileCoords& tile, float* p, int64_t ldp);

// Whether x[r][c] is finite for every r < rows, c < cols.
bool all_finite(const float* x, int rows, int64_t cols, int64_t ld);

// matmul_accumulate and matmul_accumulate_at over the visible (row, key) pairs of a tile only.
// A hidden weight is 0, but 0 * NaN is NaN: where b holds a NaN or an infinity, the plain product
// would carry it to rows (or keys) that never see it. They fall back to the plain product when
// that gives the same result (the tile is fully visible, or b is all finite).
//   c[i][n] += sum over keys j visible to row i of p[i][j] * b[j][n]      (b: keys x n)
void matmul_accumulate_visible(const AttnProblem& problem, const TileCoords& tile, const float* p,
                               int64_t ldp, const float* b, int64_t ldb, int64_t n, float* c,
                               int64_t ldc);
//   c[j][n] += sum over rows i that see key j of p[i][j] * b[i][n]        (b: rows x n)
void matmul_accumulate_at_visible(const AttnProblem& problem, const TileCoords& tile, const float* p,
                                  int64_t ldp, const float* b, int64_t ldb, int64_t n, float* c,
                                  int64_t ldc);

// Multiplies p[i][j] by the dropout keep mask / (1 - p_drop); dropped entries become 0.
void apply_dropout(const AttnProblem& problem, const TileCoords& tile, float* p, int64_t ldp);

}  // namespace flashattn::cpu
