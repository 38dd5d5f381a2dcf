// The FA3 backward's dQ workspace layout (src/fa3/bwd_dq_layout.h): a chunk's elements each at
// their own offset, every thread's accumulators 4k .. 4k + 3 of an m64nN tile as one float4 in
// thread order (the staging stores), column pairs adjacent (the conversion), and the chunks of a
// slab side by side.
#include <gtest/gtest.h>

#include <vector>

#include "fa3/bwd_dq_layout.h"

namespace flashattn::test {
namespace {

TEST(Fa3DqLayout, ChunkOffsetsArePermutationOfItsElements) {
  for (int cols : {64, 96, 128}) {
    std::vector<int> seen(size_t(64 * cols), 0);
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < cols; ++c) {
        const int off = fa3::dq_chunk_element(r, c);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, 64 * cols);
        ++seen[size_t(off)];
        if (c % 2 == 0) EXPECT_EQ(fa3::dq_chunk_element(r, c + 1), off + 1) << "pair (" << r << ", " << c << ")";
      }
    for (int off = 0; off < 64 * cols; ++off) EXPECT_EQ(seen[size_t(off)], 1) << "offset " << off << ", " << cols << " columns";
  }
}

TEST(Fa3DqLayout, EachThreadsAccumulatorsAreFloat4sInThreadOrder) {
  // m64nN accumulator j of thread t (warp w, lane l): row 16w + l/4 + 8 (j%4 / 2), column 8 (j/4) + 2 (l%4) + j%2.
  for (int t = 0; t < 128; ++t) {
    const int w = t / 32, l = t % 32;
    for (int j = 0; j < 64; ++j) {
      const int row = 16 * w + l / 4 + 8 * ((j % 4) / 2), col = 8 * (j / 4) + 2 * (l % 4) + j % 2;
      EXPECT_EQ(fa3::dq_chunk_element(row, col), (128 * (j / 4) + t) * 4 + j % 4) << "thread " << t << " accumulator " << j;
    }
  }
}

TEST(Fa3DqLayout, Float4QuadsNameTheirFourElements) {
  for (int cols : {64, 128}) {
    for (int f = 0; f < 16 * cols; ++f) {
      const DqQuad q = fa3::dq_chunk_quad(f);
      ASSERT_LT(q.row + 8, 64);
      ASSERT_LT(q.col + 1, cols);
      EXPECT_EQ(fa3::dq_chunk_element(q.row, q.col), 4 * f) << f;
      EXPECT_EQ(fa3::dq_chunk_element(q.row, q.col + 1), 4 * f + 1) << f;
      EXPECT_EQ(fa3::dq_chunk_element(q.row + 8, q.col), 4 * f + 2) << f;
      EXPECT_EQ(fa3::dq_chunk_element(q.row + 8, q.col + 1), 4 * f + 3) << f;
    }
  }
}

TEST(Fa3DqLayout, SlabFloat4QuadsAreTheirChunksQuads) {
  for (int chunk_cols : {64, 128})
    for (int dq_cols : {chunk_cols, 2 * chunk_cols}) {
      for (int f = 0; f < 16 * dq_cols; ++f) {
        const DqQuad q = fa3::dq_slab_quad(f, chunk_cols);
        const int64_t at = fa3::dq_chunk_offset(q.row, q.col, chunk_cols, dq_cols) + fa3::dq_chunk_element(q.row, q.col % chunk_cols);
        EXPECT_EQ(at, 4 * f) << f;
        EXPECT_EQ(fa3::dq_chunk_offset(q.row + 8, q.col + 1, chunk_cols, dq_cols) +
                      fa3::dq_chunk_element(q.row + 8, (q.col + 1) % chunk_cols),
                  4 * f + 3)
            << f;
      }
    }
}

TEST(Fa3DqLayout, ChunksFollowSlabsThenColumns) {
  EXPECT_EQ(fa3::dq_chunk_offset(0, 0, 64, 128), 0);
  EXPECT_EQ(fa3::dq_chunk_offset(63, 127, 64, 128), 64 * 64);
  EXPECT_EQ(fa3::dq_chunk_offset(64, 0, 64, 128), 2 * 64 * 64);
  EXPECT_EQ(fa3::dq_chunk_offset(130, 5, 64, 64), 2 * 64 * 64);
  EXPECT_EQ(fa3::dq_chunk_offset(70, 200, 128, 256), (2 + 1) * 64 * 128);
}

}  // namespace
}  // namespace flashattn::test
