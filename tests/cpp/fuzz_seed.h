// Seeds and case counts of the fuzz tests. Case i of a test draws from its own generator seeded
// with first_seed + i (mixed with the test's salt), so a failure prints one seed and
//   FLASHATTN_FUZZ_SEED=<seed> FLASHATTN_FUZZ_CASES=1 flashattn_tests --gtest_filter=<test>
// replays exactly that case. Without the variables a test runs its default count from seed 1
// (CI: the same cases every run); tools/gpu/fuzz.sh passes a fresh seed and large counts.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace flashattn::test {

struct FuzzRun {
  uint64_t first_seed = 1;
  int cases = 0;
};

// FLASHATTN_FUZZ_SEED (decimal or 0x hex) and FLASHATTN_FUZZ_CASES override the defaults.
inline FuzzRun fuzz_run(int default_cases) {
  FuzzRun run;
  run.cases = default_cases;
  if (const char* seed = std::getenv("FLASHATTN_FUZZ_SEED"); seed != nullptr && *seed != '\0')
    run.first_seed = std::strtoull(seed, nullptr, 0);
  if (const char* cases = std::getenv("FLASHATTN_FUZZ_CASES"); cases != nullptr && *cases != '\0')
    run.cases = int(std::strtol(cases, nullptr, 0));
  return run;
}

// The generator of one case: distinct tests (salts) draw unrelated cases from the same seed.
inline std::mt19937_64 case_generator(uint64_t seed, uint64_t salt) {
  std::seed_seq mixed{uint32_t(seed), uint32_t(seed >> 32), uint32_t(salt), uint32_t(salt >> 32)};
  return std::mt19937_64(mixed);
}

inline std::string replay_hint(uint64_t seed) {
  return "replay: FLASHATTN_FUZZ_SEED=" + std::to_string(seed) + " FLASHATTN_FUZZ_CASES=1 (same --gtest_filter)";
}

}  // namespace flashattn::test
