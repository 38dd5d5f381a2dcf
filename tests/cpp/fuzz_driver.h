// The loop and the verdicts the fuzz tests share (host and GPU): one generator per case seed, a
// replay line on every failure, and what a broken call must answer.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "fuzz_invalid.h"
#include "fuzz_seed.h"

namespace flashattn::test {

inline int failed_parts() {
  const ::testing::TestResult* result = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) failed += result->GetTestPartResult(i).failed() ? 1 : 0;
  return failed;
}

// Runs body(rng) for each case of the run (fuzz_seed.h); failures carry the seed that replays
// them. Stops after a few failing cases (one bug tends to fail many).
inline void for_each_case(uint64_t salt, int default_cases, const std::function<void(std::mt19937_64&)>& body) {
  const FuzzRun run = fuzz_run(default_cases);
  std::printf("[fuzz] %d cases from seed %llu (FLASHATTN_FUZZ_SEED, FLASHATTN_FUZZ_CASES)\n", run.cases,
              static_cast<unsigned long long>(run.first_seed));
  int failing_cases = 0;
  for (int i = 0; i < run.cases && failing_cases < 5; ++i) {
    const uint64_t seed = run.first_seed + uint64_t(i);
    SCOPED_TRACE(replay_hint(seed));
    const int before = failed_parts();
    std::mt19937_64 rng = case_generator(seed, salt);
    body(rng);
    if (failed_parts() > before) ++failing_cases;
  }
}

// A broken call: validation must refuse it (unless the backend choice is what is broken), and the
// entry point must answer with a clean error naming an argument the breakage allows, the same
// error validation gave. `call` is not run when validation accepted the call by mistake (it could
// read out of bounds).
inline void expect_refused(const Breakage& broken, const Status& validated, const std::function<Status()>& call) {
  SCOPED_TRACE("broken: " + broken.what);
  if (validated.ok() && !broken.at_dispatch) {
    ADD_FAILURE() << "validation accepted the broken call";
    return;
  }
  const Status st = call();
  ASSERT_FALSE(st.ok()) << "the entry point accepted the broken call";
  EXPECT_TRUE(st.code() == ErrorCode::InvalidArgument || st.code() == ErrorCode::Unsupported)
      << "code " << int(st.code()) << ": " << st.message();
  std::string allowed;
  for (const std::string& a : broken.arguments) allowed += "'" + a + "' ";
  EXPECT_TRUE(broken.names(st.argument())) << "names '" << st.argument() << "', expected one of " << allowed << ": "
                                           << st.message();
  EXPECT_NE(st.message().find("argument '" + st.argument() + "'"), std::string::npos) << st.message();
  if (!validated.ok()) {
    EXPECT_EQ(st.message(), validated.message()) << "the entry point and validation disagree";
  }
}

}  // namespace flashattn::test
