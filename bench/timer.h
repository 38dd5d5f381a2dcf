// Host wall-clock timing: warm-up calls, then one steady_clock measurement per repeat.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace flashattn::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int repeats = 0;
};

inline Timing summarize(std::vector<double> samples_ms) {
  Timing t;
  t.repeats = int(samples_ms.size());
  if (samples_ms.empty()) return t;
  std::sort(samples_ms.begin(), samples_ms.end());
  const size_t n = samples_ms.size();
  t.median_ms = n % 2 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  t.min_ms = samples_ms.front();
  return t;
}

// Calls `run` warmup + repeats times; `run` returns false to stop early (an error it recorded).
// Returns the samples of the timed calls only.
template <typename Run>
std::vector<double> time_host(Run&& run, int warmup, int repeats) {
  std::vector<double> samples;
  for (int i = 0; i < warmup; ++i)
    if (!run()) return samples;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok = run();
    const auto stop = std::chrono::steady_clock::now();
    if (!ok) break;
    samples.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return samples;
}

}  // namespace flashattn::bench
