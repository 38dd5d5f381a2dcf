// How the FA2 forward cuts a call into CTAs: the split-KV count for num_splits = 0. Host code
// only, free of CUDA, so the rule is unit-tested on the CPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace flashattn::fa2 {

struct SplitInputs {
  int64_t ctas = 0;          // CTAs without splitting: row blocks x heads x batch
  int64_t longest_keys = 0;  // keys of the longest sequence (an upper bound is fine)
  int64_t tile_keys = 0;     // keys per K/V tile of the kernel
  int multiprocessors = 0;
  int ctas_per_sm = 1;       // resident CTAs per SM (occupancy of the kernel)
};

// Splits for num_splits = 0, FlashAttention's wave rule: none when the CTAs already fill every
// resident slot; otherwise the fewest splits whose last wave is at least 85 % as full as the best
// choice's (a wave = multiprocessors x ctas_per_sm CTAs), keeping at least two key tiles per split
// and at most 64 splits.
inline int choose_fwd_splits(const SplitInputs& in) {
  const int64_t slots = int64_t(std::max(1, in.multiprocessors)) * std::max(1, in.ctas_per_sm);
  if (in.ctas <= 0 || in.ctas >= slots) return 1;
  const int64_t by_keys = std::max<int64_t>(1, in.longest_keys / (2 * std::max<int64_t>(1, in.tile_keys)));
  const int max_splits = int(std::min<int64_t>(64, by_keys));
  const auto efficiency = [&](int splits) {
    const double waves = double(in.ctas * splits) / double(slots);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int s = 1; s <= max_splits; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_splits; ++s)
    if (efficiency(s) >= 0.85 * best) return s;
  return 1;
}

}  // namespace flashattn::fa2
