#include "combine_case.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "test_util.h"

namespace flashattn::test {

std::string CombineCase::name() const {
  std::ostringstream s;
  s << "splits" << splits << "_b" << batch << "_s" << seqlen << "_h" << heads << "_d" << head_dim
    << (varlen ? "_varlen" : "") << "_" << dtype_name(out_dtype) << (with_lse ? "" : "_nolse") << "_empty"
    << empty_share;
  return s.str();
}

void check_combine_case(const CombineCase& c, Backend backend, const CombineRunner& runner) {
  SCOPED_TRACE(c.name());
  const int splits = c.splits, batch = c.varlen ? 1 : c.batch, seqlen = c.seqlen, heads = c.heads, dim = c.head_dim;
  std::mt19937_64 rng(c.seed);
  HostTensor out_partial(DType::F32, c.varlen ? std::vector<int64_t>{splits, seqlen, heads, dim}
                                              : std::vector<int64_t>{splits, batch, seqlen, heads, dim});
  HostTensor lse_partial(DType::F32, c.varlen ? std::vector<int64_t>{splits, heads, seqlen}
                                              : std::vector<int64_t>{splits, batch, heads, seqlen});
  out_partial.fill_normal(rng);
  lse_partial.fill_uniform(rng, -4.f, 30.f);
  float* lse_p = lse_partial.as<float>();
  const int64_t rows_per_split = int64_t(batch) * heads * seqlen;
  std::bernoulli_distribution empty(c.empty_share);
  for (int64_t i = 0; i < splits * rows_per_split; ++i)
    if (empty(rng)) lse_p[i] = -INFINITY;
  // Row (b=0, h=0, i=0) is empty in every split; row i=1 in all but one.
  for (int s = 0; s < splits; ++s) {
    if (rows_per_split > 0) lse_p[s * rows_per_split + 0] = -INFINITY;
    if (rows_per_split > 1 && s != 2) lse_p[s * rows_per_split + 1] = -INFINITY;
  }
  HostTensor out(c.out_dtype, c.varlen ? std::vector<int64_t>{seqlen, heads, dim}
                                       : std::vector<int64_t>{batch, seqlen, heads, dim});
  HostTensor lse(DType::F32, c.varlen ? std::vector<int64_t>{heads, seqlen} : std::vector<int64_t>{batch, heads, seqlen});
  out.poison();
  lse.poison();
  CombineParams p;
  p.out_partial = out_partial.view();
  p.lse_partial = lse_partial.view();
  p.out = out.view();
  if (c.with_lse) p.softmax_lse = lse.view();
  p.backend = backend;
  const Status st = runner ? runner(p) : combine(p);
  ASSERT_TRUE(st.ok()) << st.message();

  const float* op = out_partial.as<float>();
  double worst = 0, worst_lse = 0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < seqlen; ++i) {
        const int64_t lse_row = (int64_t(b) * heads + h) * seqlen + i;  // same index in both layouts
        double m = -INFINITY;
        for (int s = 0; s < splits; ++s) m = std::max(m, double(lse_p[s * rows_per_split + lse_row]));
        double sum = 0;
        for (int s = 0; s < splits; ++s) sum += std::exp(double(lse_p[s * rows_per_split + lse_row]) - m);
        const double expect_lse = m == -INFINITY ? -INFINITY : m + std::log(sum);
        if (c.with_lse) {
          const float got_lse = lse.as<float>()[lse_row];
          if (std::isinf(expect_lse)) {
            EXPECT_TRUE(std::isinf(got_lse) && got_lse < 0) << "row with no keys: lse " << got_lse;
          } else {
            worst_lse = std::max(worst_lse, std::fabs(got_lse - expect_lse));
          }
        }
        for (int x = 0; x < dim; ++x) {
          double acc = 0;
          if (m != -INFINITY)
            for (int s = 0; s < splits; ++s) {
              const double w = std::exp(double(lse_p[s * rows_per_split + lse_row]) - m) / sum;
              acc += w * op[(((int64_t(s) * batch + b) * seqlen + i) * heads + h) * dim + x];
            }
          const int64_t out_index = ((int64_t(b) * seqlen + i) * heads + h) * dim + x;
          worst = std::max(worst, std::fabs(double(out.get(out_index)) - acc) / (1 + std::fabs(acc)));
        }
      }
  const double tol = c.out_dtype == DType::F32 ? 1e-5 : c.out_dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;
  EXPECT_LE(worst, tol);
  EXPECT_LE(worst_lse, 1e-5 * 30);
}

void check_combine(bool varlen, DType out_dtype, Backend backend, const CombineRunner& runner) {
  CombineCase c;
  c.varlen = varlen;
  c.batch = varlen ? 1 : 3;
  c.seqlen = varlen ? 37 : 13;
  c.out_dtype = out_dtype;
  c.seed = 99 + uint64_t(varlen);
  check_combine_case(c, backend, runner);
}

}  // namespace flashattn::test
