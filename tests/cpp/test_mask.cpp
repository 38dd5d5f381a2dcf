// The mask rules of common/mask.h that kernels rely on: clamp_windows keeps every (row, key)
// visibility of any window, and the 32-bit per-row key interval of clamped windows (row_keys_32, the
// FA3 forward's mask) equals visible_keys, for rows past seqlen_q too (a last row block's padding);
// its transpose per key (key_rows_32, the FA3 backward's mask) agrees with key_visible and
// visible_rows.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>

#include "common/mask.h"
#include "common/problem.h"

namespace flashattn::test {
namespace {

constexpr int kWindows[] = {-1, 0, 1, 3, 7, 40, 63, 64, 65, 200, INT_MAX - 1, INT_MAX};

TEST(MaskWindows, ClampKeepsEveryVisibility) {
  for (int sq : {1, 5, 64, 77}) {
    for (int sk : {0, 1, 6, 64, 90}) {
      for (int left : kWindows) {
        for (int right : kWindows) {
          const MaskParams m{left, right};
          // Clamped to bounds of the call (varlen: the longest sequence, or all rows), used on a
          // sequence of (sq, sk) within them.
          for (int extra : {0, 3, 1000}) {
            const MaskParams c = clamp_windows(m, sq + extra, sk + 2 * extra);
            EXPECT_EQ(c.limits_keys(), m.limits_keys());
            for (int row = 0; row < sq; ++row)
              for (int key = -1; key <= sk; ++key)
                ASSERT_EQ(key_visible(c, row, key, sq, sk), key_visible(m, row, key, sq, sk))
                    << "sq " << sq << " sk " << sk << " extra " << extra << " window " << left << "," << right << " row "
                    << row << " key " << key;
          }
        }
      }
    }
  }
}

TEST(MaskWindows, ThirtyTwoBitIntervalOfClampedWindowsMatchesVisibleKeys) {
  for (int sq : {1, 5, 64, 77, 1 << 20}) {
    for (int sk : {0, 1, 6, 64, 90, (1 << 30) - 7}) {
      for (int left : kWindows) {
        for (int right : kWindows) {
          const MaskParams c = clamp_windows(MaskParams{left, right}, sq, sk);
          for (int row : {0, 1, sq / 2, sq - 1, sq, sq + 190}) {
            const KeyRange want = visible_keys(c, row, row + 1, sq, sk);
            const RowKeys got = row_keys_32(c, row, sq, sk);
            // Empty intervals may differ in their bounds; every key must agree.
            if (want.empty()) {
              EXPECT_GE(got.begin, got.end) << "sq " << sq << " sk " << sk << " row " << row;
            } else {
              EXPECT_EQ(got.begin, want.begin) << "sq " << sq << " sk " << sk << " window " << left << "," << right << " row " << row;
              EXPECT_EQ(got.end, want.end) << "sq " << sq << " sk " << sk << " window " << left << "," << right << " row " << row;
            }
          }
        }
      }
    }
  }
}

// The FA3 forward tests a key tile against the span found once per row block: every tile of every
// row block must get tile_fully_visible_32's answer, for rows past seqlen_q (the last block's
// padding) and windows reaching before the first key or past the last.
TEST(MaskWindows, FullyVisibleTileSpanMatchesTheTileTest) {
  for (int sq : {1, 5, 64, 77, 300}) {
    for (int sk : {0, 1, 6, 64, 90, 128, 129, 500}) {
      for (int left : kWindows) {
        for (int right : kWindows) {
          const MaskParams c = clamp_windows(MaskParams{left, right}, sq, sk);
          for (int block_n : {64, 80, 128, 176}) {
            for (int rows : {64, 128}) {
              for (int row0 = 0; row0 < sq + rows; row0 += rows / 2) {
                const TileSpan span = fully_visible_tiles_32(c, row0, row0 + rows, block_n, sq, sk);
                for (int tile = 0; tile * block_n < sk + 2 * block_n; ++tile)
                  ASSERT_EQ(span.contains(tile),
                            tile_fully_visible_32(c, row0, row0 + rows, tile * block_n, (tile + 1) * block_n, sq, sk))
                      << "sq " << sq << " sk " << sk << " window " << left << "," << right << " block_n " << block_n
                      << " rows " << row0 << "+" << rows << " tile " << tile;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_FALSE(fully_visible_tiles_32(MaskParams{}, 10, 10, 64, 100, 100).contains(0));  // no rows
}

TEST(MaskWindows, ThirtyTwoBitRowsOfAKeyMatchKeyVisible) {
  for (int sq : {1, 5, 64, 77}) {
    for (int sk : {0, 1, 6, 64, 90}) {
      for (int left : kWindows) {
        for (int right : kWindows) {
          const MaskParams c = clamp_windows(MaskParams{left, right}, sq, sk);
          for (int key = 0; key <= sk + 3; ++key) {
            const RowKeys rows = key_rows_32(c, key, sq, sk);
            for (int row = 0; row < sq; ++row)
              ASSERT_EQ(row >= rows.begin && row < rows.end, key_visible(c, row, key, sq, sk))
                  << "sq " << sq << " sk " << sk << " window " << left << "," << right << " key " << key << " row " << row;
          }
        }
      }
    }
  }
}

TEST(MaskWindows, ThirtyTwoBitRowsOfAKeyMatchVisibleRowsOnLongSequences) {
  for (int sq : {1, 77, 1 << 20, (1 << 30) - 7}) {
    for (int sk : {1, 90, (1 << 30) - 7}) {
      for (int left : kWindows) {
        for (int right : kWindows) {
          const MaskParams c = clamp_windows(MaskParams{left, right}, sq, sk);
          for (int key : {0, 1, sk / 2, sk - 1}) {
            if (key >= sk) continue;  // (visible_rows takes keys of the sequence)
            const KeyRange want = visible_rows(c, key, key + 1, sq, sk);
            const RowKeys got = key_rows_32(c, key, sq, sk);
            if (want.empty()) {
              EXPECT_GE(got.begin, got.end) << "sq " << sq << " sk " << sk << " key " << key;
            } else {
              EXPECT_EQ(got.begin, want.begin) << "sq " << sq << " sk " << sk << " window " << left << "," << right << " key " << key;
              EXPECT_EQ(got.end, want.end) << "sq " << sq << " sk " << sk << " window " << left << "," << right << " key " << key;
            }
          }
        }
      }
    }
  }
}

// The FA2 launchers' narrowing: windows past the host's bound of every sequence length shrink to
// it, smaller ones stay, and the kernels' 32-bit row +- window of the narrowed windows cannot
// overflow. The bound trusts no max_seqlen of CUDA cu_seqlens (q's and k's rows count too), takes a
// paged sequence's block-table capacity and a cache's appended keys; lengths from 2^30 on are
// refused only when a window needs narrowing.
TEST(MaskWindows, ClampToTheHostBoundOfTheLengths) {
  const int32_t offsets[2] = {0, 0};  // only their presence matters to the bound
  AttnProblem p;
  p.lens.seqlen_q = 5;
  p.lens.seqlen_k = 90;
  p.lens.total_q = 40;
  p.lens.total_k = 300;
  p.lens.seqlen_k_added = 3;
  EXPECT_EQ(p.lens.host_bound(), 93);  // dense: the lengths themselves (totals count whole batches)
  p.lens.cu_seqlens_q = offsets;
  EXPECT_EQ(p.lens.host_bound(), 93);
  p.lens.total_q = 400;
  EXPECT_EQ(p.lens.host_bound(), 400);  // a varlen sequence of q may be as long as q's rows
  p.lens.cu_seqlens_k = offsets;
  p.lens.total_k = 500;
  EXPECT_EQ(p.lens.host_bound(), 503);
  p.lens.k_capacity = 700;
  EXPECT_EQ(p.lens.host_bound(), 703);
  for (int left : kWindows)
    for (int right : kWindows) {
      AttnProblem c = p;
      c.mask = MaskParams{left, right};
      ASSERT_TRUE(clamp_windows_32(&c));
      EXPECT_EQ(c.mask.window_left, left > 703 ? 703 : left);
      EXPECT_EQ(c.mask.window_right, right > 703 ? 703 : right);
      // row + sk - sq + right + 1 and row + sk - sq - left for rows and keys within the bound
      EXPECT_LT(int64_t(703) + 703 + c.mask.window_right + 1, int64_t(INT_MAX));
    }
  p.lens.total_k = int64_t(1) << 30;
  EXPECT_TRUE(clamp_windows_32(&p));  // no window: nothing to narrow
  p.mask.window_right = 0;
  EXPECT_FALSE(clamp_windows_32(&p));
}

}  // namespace
}  // namespace flashattn::test
