// The FA2 backward's dQ workspace layout (src/fa2/dq_layout.h): a tile's 256 elements each at
// their own offset, every lane's accumulator fragment of an n8 half as one aligned float4 and a
// warp's as 512 contiguous bytes, column pairs adjacent for the conversion, and the row inverse
// the sm80 adds use for their bounds.
#include <gtest/gtest.h>

#include <vector>

#include "fa2/dq_layout.h"

namespace flashattn::test {
namespace {

TEST(Fa2DqLayout, TileOffsetsArePermutationOfItsElements) {
  std::vector<int> seen(256, 0);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      const int off = fa2::dq_tile_offset(r, c);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, 256);
      ++seen[size_t(off)];
      EXPECT_EQ(fa2::dq_tile_row(off), r) << "offset " << off;
      if (c % 2 == 0) EXPECT_EQ(fa2::dq_tile_offset(r, c + 1), off + 1) << "pair (" << r << ", " << c << ")";
    }
  for (int off = 0; off < 256; ++off) EXPECT_EQ(seen[size_t(off)], 1) << "offset " << off;
}

TEST(Fa2DqLayout, EachLanesAccumulatorsAreOneFloat4InLaneOrder) {
  // m16n8k16 accumulator registers of lane 4g + q: {(g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1)}.
  for (int half = 0; half < 2; ++half)
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, q = lane % 4, base = half * 128 + lane * 4;
      const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
      for (int reg = 0; reg < 4; ++reg)
        EXPECT_EQ(fa2::dq_tile_offset(rows[reg], 8 * half + cols[reg]), base + reg) << "half " << half << " lane " << lane;
    }
}

// The conversion reads a 64-row slab (rows 0..63 of a (sequence, head), dq_cols columns) in
// float4 order: float4 f holds (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1) of dq_slab_quad(f).
TEST(Fa2DqLayout, SlabFloat4QuadsNameTheirFourElements) {
  for (int cols : {64, 128, 256}) {
    auto at = [cols](int r, int c) { return fa2::dq_tile_index(r, c, cols) + fa2::dq_tile_offset(r % 16, c % 16); };
    for (int f = 0; f < 16 * cols; ++f) {
      const DqQuad q = fa2::dq_slab_quad(f, cols);
      ASSERT_LT(q.row % 16 + 8, 16) << f;
      ASSERT_LT(q.col + 1, cols) << f;
      EXPECT_EQ(at(q.row, q.col), 4 * f) << f;
      EXPECT_EQ(at(q.row, q.col + 1), 4 * f + 1) << f;
      EXPECT_EQ(at(q.row + 8, q.col), 4 * f + 2) << f;
      EXPECT_EQ(at(q.row + 8, q.col + 1), 4 * f + 3) << f;
    }
  }
}

TEST(Fa2DqLayout, TilesFollowRowBlocksThenColumnBlocks) {
  EXPECT_EQ(fa2::dq_tile_index(0, 0, 64), 0);
  EXPECT_EQ(fa2::dq_tile_index(15, 63, 64), 3 * 256);
  EXPECT_EQ(fa2::dq_tile_index(16, 0, 64), 4 * 256);
  EXPECT_EQ(fa2::dq_tile_index(37, 20, 128), (2 * 8 + 1) * 256);
}

}  // namespace
}  // namespace flashattn::test
