// The FA2 forward's split-KV rule (src/fa2/fwd_plan.h), host-only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fa2/fwd_plan.h"

namespace flashattn::fa2 {
namespace {

SplitInputs h200(int64_t ctas, int64_t keys) {
  SplitInputs in;
  in.ctas = ctas;
  in.longest_keys = keys;
  in.tile_keys = 64;
  in.multiprocessors = 132;
  in.ctas_per_sm = 2;
  return in;
}

double waves(const SplitInputs& in, int splits) {
  return double(in.ctas * splits) / double(in.multiprocessors * in.ctas_per_sm);
}

TEST(Fa2FwdPlan, NoSplitWhenTheCtasFillTheGpu) {
  EXPECT_EQ(choose_fwd_splits(h200(264, 1 << 17)), 1);
  EXPECT_EQ(choose_fwd_splits(h200(1000, 1 << 17)), 1);
}

TEST(Fa2FwdPlan, DecodeFillsWholeWaves) {
  // Batch 8 x 8 KV heads after pack-GQA: 64 CTAs; 4 splits make 256 of 264 slots.
  const SplitInputs b8 = h200(64, 8192);
  const int s8 = choose_fwd_splits(b8);
  EXPECT_EQ(s8, 4);
  // Batch 1: 8 CTAs; the split count makes nearly one full wave.
  const SplitInputs b1 = h200(8, 8192);
  const int s1 = choose_fwd_splits(b1);
  EXPECT_GE(waves(b1, s1), 0.85);
  EXPECT_LE(waves(b1, s1), 1.0);
}

TEST(Fa2FwdPlan, SplitsKeepTwoTilesAndAtMost64) {
  EXPECT_EQ(choose_fwd_splits(h200(8, 256)), 2);    // 4 tiles: at most 2 splits
  EXPECT_EQ(choose_fwd_splits(h200(8, 100)), 1);    // under two tiles: no split
  EXPECT_LE(choose_fwd_splits(h200(1, 1 << 20)), 64);
  EXPECT_EQ(choose_fwd_splits(h200(0, 8192)), 1);
}

TEST(Fa2FwdPlan, EveryChoiceIsNearTheBestWave) {
  const auto efficiency = [](const SplitInputs& in, int s) {
    const double w = waves(in, s);
    return w / std::ceil(w);
  };
  for (int64_t ctas = 1; ctas < 264; ctas += 7)
    for (int64_t keys : {1024, 8192, 131072}) {
      const SplitInputs in = h200(ctas, keys);
      const int chosen = choose_fwd_splits(in);
      const int allowed = int(std::min<int64_t>(64, keys / 128));
      double best = 0;
      for (int s = 1; s <= allowed; ++s) best = std::max(best, efficiency(in, s));
      EXPECT_LE(chosen, allowed);
      EXPECT_GE(efficiency(in, chosen), 0.85 * best) << ctas << " CTAs, " << keys << " keys: " << chosen;
    }
}

}  // namespace
}  // namespace flashattn::fa2
