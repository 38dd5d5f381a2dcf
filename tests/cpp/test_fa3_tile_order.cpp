// The FA3 forward's dynamic tile order (src/fa3/tile_order.h): every work tile exactly once, the
// sections made of whole heads, longest row blocks first within a section, and the section size rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "fa3/tile_order.h"

namespace flashattn::test {
namespace {

TEST(Fa3TileOrder, IsAPermutationWithLongestBlocksFirstInEachSection) {
  for (int row_blocks : {1, 3, 8, 37, 128}) {
    for (int pairs : {1, 2, 6, 16, 96, 1024}) {
      for (int shift = 0; (pairs % (1 << shift)) == 0 && (1 << shift) <= pairs; ++shift) {
        SCOPED_TRACE(testing::Message() << "row_blocks " << row_blocks << " pairs " << pairs << " shift " << shift);
        const int tiles = row_blocks * pairs, section_heads = 1 << shift, section_tiles = row_blocks * section_heads;
        std::vector<int> seen(size_t(tiles), 0);
        for (int n = 0; n < tiles; ++n) {
          const int w = fa3::scheduled_tile(FastDivmod(row_blocks), shift, n);
          ASSERT_GE(w, 0);
          ASSERT_LT(w, tiles);
          ++seen[size_t(w)];
          const int head = w / row_blocks, rank = w % row_blocks;
          // The tile's head belongs to the section of position n, and the rank (row blocks from the
          // last one) grows with n inside the section: heads x ranks in rank-major order.
          EXPECT_EQ(head / section_heads, n / section_tiles);
          EXPECT_EQ(rank, (n % section_tiles) / section_heads);
          EXPECT_EQ(head % section_heads, (n % section_tiles) % section_heads);
          if (shift == 0) EXPECT_EQ(w, n);  // one head per section: the static order
        }
        for (int w = 0; w < tiles; ++w) EXPECT_EQ(seen[size_t(w)], 1) << "tile " << w;
      }
    }
  }
}

// The backward's spelling of the same order (from a position's key block and group, no division).
TEST(Fa3TileOrder, TileOfPositionPartsIsTheScheduledTile) {
  for (int row_blocks : {1, 3, 8, 37, 128}) {
    for (int pairs : {1, 2, 6, 16, 96}) {
      for (int shift = 0; (pairs % (1 << shift)) == 0 && (1 << shift) <= pairs; ++shift) {
        for (int head = 0; head < pairs; ++head) {
          for (int index = 0; index < row_blocks; ++index) {
            const int w = fa3::scheduled_tile(FastDivmod(row_blocks), shift, index + row_blocks * head);
            const fa3::TileOfPosition t = fa3::scheduled_tile_of(row_blocks, shift, index, head);
            ASSERT_EQ(t.head, w / row_blocks) << row_blocks << " " << pairs << " " << shift << " " << head << " " << index;
            ASSERT_EQ(t.rank, w % row_blocks) << row_blocks << " " << pairs << " " << shift << " " << head << " " << index;
          }
        }
      }
    }
  }
}

TEST(Fa3TileOrder, SectionShiftIsTheLargestFittingPowerOfTwoDividingThePairs) {
  for (int64_t pairs : {1, 2, 3, 12, 16, 48, 67, 256, 1024}) {
    for (int64_t fit : {0, 1, 2, 3, 5, 8, 12, 64, 100000}) {
      const int shift = fa3::section_shift_for(pairs, fit);
      const int64_t heads = int64_t(1) << shift;
      EXPECT_EQ(pairs % heads, 0) << pairs << " " << fit;
      EXPECT_TRUE(heads == 1 || heads <= fit) << pairs << " " << fit;
      const int64_t next = heads * 2;  // the next power of two fails one of the two rules
      EXPECT_TRUE(next > fit || pairs % next != 0) << pairs << " " << fit;
    }
  }
  EXPECT_EQ(fa3::section_shift_for(256, 16), 4);
  EXPECT_EQ(fa3::section_shift_for(48, 12), 3);  // 8 of 12 fit; 16 does not divide 48
  EXPECT_EQ(fa3::section_shift_for(67, 100), 0);
}

}  // namespace
}  // namespace flashattn::test
