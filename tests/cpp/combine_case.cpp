#include "combine_case.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"

namespace flashattn::test {

void check_combine(bool varlen, DType out_dtype, Backend backend, const CombineRunner& runner) {
  const int splits = 5, batch = varlen ? 1 : 3, seqlen = varlen ? 37 : 13, heads = 4, dim = 40;
  std::mt19937_64 rng(99 + int(varlen));
  HostTensor out_partial(DType::F32, varlen ? std::vector<int64_t>{splits, seqlen, heads, dim}
                                            : std::vector<int64_t>{splits, batch, seqlen, heads, dim});
  HostTensor lse_partial(DType::F32, varlen ? std::vector<int64_t>{splits, heads, seqlen}
                                            : std::vector<int64_t>{splits, batch, heads, seqlen});
  out_partial.fill_normal(rng);
  lse_partial.fill_uniform(rng, -4.f, 30.f);
  float* lse_p = lse_partial.as<float>();
  const int64_t rows_per_split = int64_t(batch) * heads * seqlen;
  // Row (b=0, h=0, i=0) is empty in every split; row i=1 in all but one.
  for (int s = 0; s < splits; ++s) {
    lse_p[s * rows_per_split + 0] = -INFINITY;
    if (s != 2) lse_p[s * rows_per_split + 1] = -INFINITY;
  }
  HostTensor out(out_dtype, varlen ? std::vector<int64_t>{seqlen, heads, dim} : std::vector<int64_t>{batch, seqlen, heads, dim});
  HostTensor lse(DType::F32, varlen ? std::vector<int64_t>{heads, seqlen} : std::vector<int64_t>{batch, heads, seqlen});
  out.poison();
  lse.poison();
  CombineParams p;
  p.out_partial = out_partial.view();
  p.lse_partial = lse_partial.view();
  p.out = out.view();
  p.softmax_lse = lse.view();
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
        const float got_lse = lse.as<float>()[lse_row];
        if (std::isinf(expect_lse)) {
          EXPECT_TRUE(std::isinf(got_lse) && got_lse < 0) << "row with no keys: lse " << got_lse;
        } else {
          worst_lse = std::max(worst_lse, std::fabs(got_lse - expect_lse));
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
  const double tol = out_dtype == DType::F32 ? 1e-5 : out_dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;
  EXPECT_LE(worst, tol);
  EXPECT_LE(worst_lse, 1e-5 * 30);
}

}  // namespace flashattn::test
