// combine(): merging split-KV partial outputs by their LSEs, checked in double; the dropout mask
// entry point against the Philox contract.
#include <gtest/gtest.h>

#include <cmath>

#include "combine_case.h"
#include "common/philox.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

TEST(Combine, DenseFloat32) { check_combine(false, DType::F32, Backend::Cpu); }
TEST(Combine, DenseBf16) { check_combine(false, DType::BF16, Backend::Cpu); }
TEST(Combine, VarlenFp16) { check_combine(true, DType::F16, Backend::Cpu); }

TEST(DropoutMask, MatchesPhiloxContract) {
  const int batch = 2, heads = 3, sq = 19, sk = 45;
  HostTensor mask(DType::U8, {batch, heads, sq, sk});
  DropoutMaskParams p;
  p.mask = mask.view();
  p.dropout_p = 0.25f;
  p.dropout_seed = 0xdeadbeefcafeull;
  p.dropout_offset = 12345;
  ASSERT_TRUE(dropout_mask(p).ok());
  const uint8_t* m = mask.as<uint8_t>();
  int64_t kept = 0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < sq; ++i)
        for (int j = 0; j < sk; ++j) {
          const bool keep = dropout_keep(p.dropout_seed, p.dropout_offset, b, heads, h, i, j,
                                         dropout_threshold(p.dropout_p));
          ASSERT_EQ(m[((b * heads + h) * sq + i) * sk + j], keep ? 1 : 0);
          kept += keep;
        }
  const double n = double(batch) * heads * sq * sk;
  EXPECT_NEAR(double(kept) / n, 0.75, 5 * std::sqrt(0.25 * 0.75 / n));
}

}  // namespace
}  // namespace flashattn::test
