// The order of the FA3 forward's work tiles in its dynamic schedule (fwd_scheduler.cuh) and of the
// backward's CTAs (bwd_block.cuh), host and device so that the CPU tests check it. A work tile w =
// head index * row_blocks + rank (forward: head index = b * heads_q + h, rank = row blocks from
// the last one; backward: a (sequence, kv head) group and its key blocks in their order); position
// n of the order maps to w.
#pragma once

#include <cstdint>

#include "common/fast_divmod.h"
#include "common/host_device.h"

namespace flashattn::fa3 {

// The (sequence, head) pairs are cut into sections of 2^section_shift consecutive ones; sections
// run one after the other, and within a section all its heads' last row blocks first, then the
// next-to-last, ...: longest first, so the tiles still running at the end are short ones
// (balanced CTAs), while the K and V the CTAs read at one time are a section's. A power of two
// that divides the pairs keeps this at one division by row_blocks (the producer has 24 registers),
// a multiply-high and a shift: n / (row_blocks 2^s) = (n >> s) / row_blocks. section_shift = 0:
// w = n.
FA_HD int scheduled_tile(const FastDivmod& row_blocks, int section_shift, int n) {
  const int section = row_blocks.div(n >> section_shift);
  const int in_section = n - ((section * row_blocks.divisor) << section_shift);
  const int rank = in_section >> section_shift;
  const int head = (section << section_shift) + (in_section & ((1 << section_shift) - 1));
  return head * row_blocks.divisor + rank;
}

// scheduled_tile's tile for the position index + row_blocks * head (index < row_blocks), from
// those two parts without a division (the backward's CTAs read them off blockIdx): the tile's
// head and rank.
struct TileOfPosition {
  int head, rank;
};
FA_HD TileOfPosition scheduled_tile_of(int row_blocks, int section_shift, int index, int head) {
  const int mask = (1 << section_shift) - 1;
  const int in_section = index + row_blocks * (head & mask);
  return {(head & ~mask) + (in_section & mask), in_section >> section_shift};
}

// The section_shift of `pairs` (sequence, head) pairs when `fit` of them have their K and V in the
// section budget: the largest power of two <= fit that divides pairs (0 when fit < 2).
inline int section_shift_for(int64_t pairs, int64_t fit) {
  int shift = 0;
  while ((int64_t(2) << shift) <= fit && pairs % (int64_t(2) << shift) == 0) ++shift;
  return shift;
}

}  // namespace flashattn::fa3
