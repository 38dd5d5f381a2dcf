// The naive reference over whole problems: gathers each (sequence, head) into dense double
// arrays through RowsView (dense, varlen, paged and batch-indexed storage alike), runs the
// one-head core of reference_core.cpp and scatters the results back.
#include "cpu/reference.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/philox.h"
#include "cpu/element_io.h"
#include "cpu/reference_core.h"
#include "cpu/thread_pool.h"

namespace flashattn::cpu::reference {
namespace {

HeadMath head_math(DType dtype, Precision precision) {
  HeadMath math;
  math.input_precision = precision == Precision::InputPrecision;
  math.prob_dtype = dtype;
  // No framework produces fp8 matmul results, so with fp8 inputs the scores (and dP, dS) stay in
  // bf16 and only P is quantised to fp8, as the fp8 kernels themselves do. (The inputs are the
  // dequantised ones: fwd gathers them times their descales.)
  math.score_dtype = dtype == DType::F8E4M3 ? DType::BF16 : dtype;
  return math;
}

// Row `row` of head h of sequence b, written to dst[0, dim) as doubles.
void load_head_row(const RowsView& view, DType dtype, int64_t b, int64_t row, int64_t h, int64_t dim,
                   double* dst) {
  const int64_t base = view.offset(b, row, h);
  for (int64_t c = 0; c < dim; ++c) dst[c] = load_element(view.data, base + c, dtype);
}

// Rows [0, rows) of head h of sequence b as a dense [rows][dim] double array, each element times
// `descale` (fp8 inputs: the dequantised values, exact in double).
std::vector<double> gather(const RowsView& view, DType dtype, int64_t b, int64_t h, int64_t rows,
                           int64_t dim, double descale = 1.0) {
  std::vector<double> values(size_t(rows * dim));
  for (int64_t r = 0; r < rows; ++r) load_head_row(view, dtype, b, r, h, dim, values.data() + r * dim);
  if (descale != 1.0)
    for (double& x : values) x *= descale;
  return values;
}

// Stores src[0, dim) into one head row, each element rounded once to dtype.
void scatter_row(const RowsView& view, DType dtype, int64_t b, int64_t row, int64_t h, int64_t dim,
                 const double* src) {
  const int64_t base = view.offset(b, row, h);
  for (int64_t c = 0; c < dim; ++c) store_element(view.data, base + c, dtype, narrow_for_store(src[c], dtype));
}

// Stores a dense [rows][dim] double array into rows [0, rows) of head h of sequence b.
void scatter(const RowsView& view, DType dtype, int64_t b, int64_t h, int64_t rows, int64_t dim,
             const double* values) {
  for (int64_t r = 0; r < rows; ++r) scatter_row(view, dtype, b, r, h, dim, values + r * dim);
}

// The Philox keep-mask of (b, h) as [sq][sk] bytes; empty without dropout.
std::vector<uint8_t> keep_mask(const AttnProblem& p, int64_t b, int64_t h, int64_t sq, int64_t sk) {
  if (p.dropout_p <= 0.f) return {};
  std::vector<uint8_t> keep(size_t(sq * sk));
  const uint32_t threshold = dropout_threshold(p.dropout_p);
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j)
      keep[size_t(i * sk + j)] =
          dropout_keep(p.dropout_seed, p.dropout_offset, b, p.heads_q, h, i, j, threshold) ? 1 : 0;
  return keep;
}

// Head h of sequence b over its gathered rows and keep mask (which must outlive it).
HeadProblem head_problem(const AttnProblem& p, Precision precision, int64_t b, int64_t h, int64_t sq, int64_t sk,
                         const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                         const std::vector<uint8_t>& keep) {
  HeadProblem head;
  head.q = q.data();
  head.k = k.data();
  head.v = v.data();
  head.keep = keep.data();
  head.seqlen_q = sq;
  head.seqlen_k = sk;
  head.head_dim = p.head_dim;
  head.head_dim_v = p.head_dim_v;
  head.score = p.score;
  head.mask = p.mask;
  head.alibi_slope = p.alibi_slope(b, h);
  head.dropout_p = p.dropout_p;
  head.math = head_math(p.dtype, precision);
  return head;
}

int64_t element_bytes(DType dtype) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16: return 2;
    case DType::F8E4M3:
    case DType::U8: return 1;
    default: return 4;
  }
}

// Rotates the pairs of x's first rotary_dim dims by the angles of position pos (NeoX halves, or
// GPT-J interleaved pairs); in double, or in float when emulating the input precision.
void apply_rotary(double* x, const RotaryParams& rotary, DType table_dtype, int64_t pos,
                  bool float_math) {
  const int64_t half = rotary.rotary_dim / 2;
  for (int64_t k = 0; k < half; ++k) {
    const int64_t first = rotary.interleaved ? 2 * k : k;
    const int64_t second = rotary.interleaved ? 2 * k + 1 : k + half;
    const double c = load_element(rotary.cos, pos * rotary.row_stride + k, table_dtype);
    const double s = load_element(rotary.sin, pos * rotary.row_stride + k, table_dtype);
    const double x1 = x[first], x2 = x[second];
    if (float_math) {
      const float c32 = float(c), s32 = float(s), a = float(x1), b = float(x2);
      x[first] = a * c32 - b * s32;
      x[second] = a * s32 + b * c32;
    } else {
      x[first] = x1 * c - x2 * s;
      x[second] = x1 * s + x2 * c;
    }
  }
}

}  // namespace

// Heads run on the CPU backend's worker threads: each (sequence, head) reads its own rows and
// writes its own outputs, so the results do not depend on the thread count.
void fwd(const AttnProblem& problem, Precision precision) {
  const AttnProblem& p = problem;
  WorkerTeam().parallel_for(p.batch * p.heads_q, [&](int64_t item, int) {
    const int64_t b = item / p.heads_q, h = item % p.heads_q;
    const int64_t sq = p.lens.q(b), sk = p.lens.k(b);
    const int64_t hk = p.kv_head(h);
    const std::vector<double> q = gather(p.q, p.dtype, b, h, sq, p.head_dim, p.descale_q(b, h));
    const std::vector<double> k = gather(p.k, p.dtype, b, hk, sk, p.head_dim, p.descale_k(b, hk));
    const std::vector<double> v = gather(p.v, p.dtype, b, hk, sk, p.head_dim_v, p.descale_v(b, hk));
    const std::vector<uint8_t> keep = keep_mask(p, b, h, sq, sk);
    const HeadForward result = head_forward(head_problem(p, precision, b, h, sq, sk, q, k, v, keep));
    scatter(p.out, p.out_dtype, b, h, sq, p.head_dim_v, result.out.data());
    if (p.lse.defined())
      for (int64_t i = 0; i < sq; ++i) p.lse.data[p.lse.offset(b, i, h)] = float(result.lse[size_t(i)]);
  });
}

void bwd(const BwdProblem& problem, Precision precision) {
  const AttnProblem& p = problem.fwd;
  const DType grad_dtype = p.out_dtype;
  const int64_t group = p.heads_q / p.heads_k;  // query heads per kv head
  // A kv head per item: its dK, dV and its query heads' dQ are the item's alone (as in fwd).
  WorkerTeam().parallel_for(p.batch * p.heads_k, [&](int64_t item, int) {
    const int64_t b = item / p.heads_k, hk = item % p.heads_k;
    const int64_t sq = p.lens.q(b), sk = p.lens.k(b);
    const std::vector<double> k = gather(p.k, p.dtype, b, hk, sk, p.head_dim);
    const std::vector<double> v = gather(p.v, p.dtype, b, hk, sk, p.head_dim_v);
    // dK, dV of a kv head sum over the query heads that share it (GQA); keys no query sees
    // keep their zeros, which are written like every other row.
    std::vector<double> dk(size_t(sk * p.head_dim), 0.0), dv(size_t(sk * p.head_dim_v), 0.0);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const std::vector<double> q = gather(p.q, p.dtype, b, h, sq, p.head_dim);
      const std::vector<double> dout = gather(problem.dout, problem.dout_dtype, b, h, sq, p.head_dim_v);
      const std::vector<uint8_t> keep = keep_mask(p, b, h, sq, sk);
      const HeadGradients g = head_backward(head_problem(p, precision, b, h, sq, sk, q, k, v, keep), dout.data());
      scatter(problem.dq, grad_dtype, b, h, sq, p.head_dim, g.dq.data());
      for (size_t i = 0; i < dk.size(); ++i) dk[i] += g.dk[i];
      for (size_t i = 0; i < dv.size(); ++i) dv[i] += g.dv[i];
    }
    scatter(problem.dk, grad_dtype, b, hk, sk, p.head_dim, dk.data());
    scatter(problem.dv, grad_dtype, b, hk, sk, p.head_dim_v, dv.data());
  });
}

void fwd_kvcache(const KvCacheProblem& problem, Precision precision) {
  const AttnProblem& attn = problem.attn;
  const RotaryParams& rotary = problem.rotary;
  const bool has_rotary = rotary.rotary_dim > 0;
  const bool float_math = precision == Precision::InputPrecision;

  std::vector<double> x(size_t(attn.head_dim));
  // 1. Append k_new (rotated at its cache position) and v_new after the tokens already cached.
  for (int64_t b = 0; b < attn.batch; ++b) {
    for (int64_t t = 0; t < problem.seqlen_new; ++t) {
      const int64_t pos = problem.first_new_position(b) + t, row = problem.new_key_row(b, t);
      for (int64_t hk = 0; hk < attn.heads_k; ++hk) {
        if (problem.k_new.data != nullptr) {
          load_head_row(problem.k_new, attn.dtype, b, t, hk, attn.head_dim, x.data());
          if (has_rotary) apply_rotary(x.data(), rotary, attn.dtype, pos, float_math);
          scatter_row(attn.k, attn.dtype, b, row, hk, attn.head_dim, x.data());
        }
        if (problem.v_new.data != nullptr) {
          const int64_t src = problem.v_new.offset(b, t, hk), dst = attn.v.offset(b, row, hk);
          for (int64_t c = 0; c < attn.head_dim_v; ++c)
            store_element(attn.v.data, dst + c, attn.dtype, load_element(problem.v_new.data, src + c, attn.dtype));
        }
      }
    }
  }

  if (!has_rotary) {
    fwd(attn, precision);
    return;
  }

  // 2. Rotate q into a dense (batch, seqlen_q, heads_q, head_dim) buffer of q's dtype.
  const int64_t sq_max = attn.lens.seqlen_q, d = attn.head_dim;
  std::vector<uint8_t> q_buffer(size_t(attn.batch * sq_max * attn.heads_q * d * element_bytes(attn.dtype)));
  RowsView rotated_q;
  rotated_q.data = q_buffer.data();
  rotated_q.head_stride = d;
  rotated_q.row_stride = attn.heads_q * d;
  rotated_q.batch_stride = sq_max * attn.heads_q * d;
  for (int64_t b = 0; b < attn.batch; ++b) {
    for (int64_t i = 0; i < attn.lens.q(b); ++i) {
      const int64_t pos = problem.first_new_position(b) + (problem.rotary_q_per_row ? i : 0);
      for (int64_t h = 0; h < attn.heads_q; ++h) {
        load_head_row(attn.q, attn.dtype, b, i, h, d, x.data());
        apply_rotary(x.data(), rotary, attn.dtype, pos, float_math);
        scatter_row(rotated_q, attn.dtype, b, i, h, d, x.data());
      }
    }
  }

  // 3. Attention over the cache with the rotated q.
  AttnProblem with_rotated_q = attn;
  with_rotated_q.q = rotated_q;
  fwd(with_rotated_q, precision);
}

}  // namespace flashattn::cpu::reference
