// The FA3 forward's plan (src/fa3/fwd_plan.h), host-only: tiles, ping-pong, the epilogue's stores
// and the sections each call runs with (today's rules, written out per case), and the checks of
// forced plans.
#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <tuple>
#include <utility>

#include "fa3/fwd_plan.h"
#include "plan_test_util.h"
#if defined(FLASHATTN_WITH_CUDA)
#include "fa3/fp8_fwd_plan.h"  // fp8_fwd_plan is built with the CUDA sources
#endif

namespace flashattn::fa3 {

std::ostream& operator<<(std::ostream& os, const FwdPlan& p) {
  return os << "{d" << p.head_dim << "/" << p.head_dim_v << " " << 64 * p.consumers << "x" << p.block_n
            << (p.general_score ? " general" : " plain") << (p.pingpong ? " ping-pong" : "")
            << (p.tma_store_o ? " tma stores" : "") << " sections " << p.section_mb << "}";
}

namespace {

using test::causal;
using test::FailsWith;
using test::plan_call;
using test::varlen;
using test::windowed;

FwdPlan tiles(int head_dim, int head_dim_v, int block_n, int consumers, bool pingpong, bool tma_store_o,
              bool general = false) {
  FwdPlan p;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.block_n = block_n;
  p.consumers = consumers;
  p.pingpong = pingpong;
  p.tma_store_o = tma_store_o;
  p.general_score = general;
  return p;
}

AttnProblem with_dims(int64_t d, int64_t dv, int64_t sq, int64_t sk) {
  AttnProblem p = plan_call(d, sq, sk);
  p.head_dim_v = dv;
  return p;
}

// d64: three consumer warpgroups (192 rows) where they pad the problem at most 7 % more than
// 128 x 128; 128 keys with ping-pong, with or without a mask.
TEST(Fa3FwdPlan, D64Tiles) {
  const std::tuple<int64_t, int64_t, int> calls[] = {
      // seqlen_q, seqlen_k, consumers
      {512, 512, 2},   {1024, 1024, 2}, {2048, 2048, 3}, {4096, 4096, 3}, {16384, 16384, 3},
      {3000, 3000, 3}, {1000, 2300, 2}, {192, 1920, 3},  {300, 700, 3},
  };
  for (const auto& [sq, sk, consumers] : calls) {
    for (int d : {32, 64}) {
      EXPECT_EQ(fwd_plan(plan_call(d, sq, sk)), tiles(64, 64, 128, consumers, true, false)) << sq << " x " << sk;
      EXPECT_EQ(fwd_plan(varlen(plan_call(d, sq, sk))), tiles(64, 64, 128, consumers, true, false)) << sq << " x " << sk;
    }
    EXPECT_EQ(fwd_plan(causal(plan_call(64, sq, sk))), tiles(64, 64, 128, consumers, true, false)) << sq << " x " << sk;
    EXPECT_EQ(fwd_plan(windowed(plan_call(64, sq, sk), 100, 30)), tiles(64, 64, 128, consumers, true, false));
  }
}

// d128: 176 keys from 1k keys where that pads the keys at most 4 % more than 128, else 144 where
// that pads at most 2 % more, else 128; causal and windowed calls 128; ping-pong only on 144 keys.
TEST(Fa3FwdPlan, D128Tiles) {
  const std::tuple<int64_t, int> keys[] = {
      {512, 128},  {700, 144},  {900, 144},  {1000, 144}, {1024, 176}, {2048, 176},
      {2304, 144}, {2816, 176}, {4096, 176}, {8192, 176}, {16384, 176}, {1300, 176}, {1152, 144},
  };
  for (const auto& [sk, block_n] : keys) {
    for (int d : {72, 128}) {
      const bool pingpong = block_n == 144;
      EXPECT_EQ(fwd_plan(plan_call(d, 1000, sk)), tiles(128, 128, block_n, 2, pingpong, true)) << "d" << d << " sk " << sk;
      EXPECT_EQ(fwd_plan(varlen(plan_call(d, 1000, sk))), tiles(128, 128, block_n, 2, pingpong, false)) << "sk " << sk;
    }
    EXPECT_EQ(fwd_plan(causal(plan_call(128, 1000, sk))), tiles(128, 128, 128, 2, false, true)) << "sk " << sk;
    EXPECT_EQ(fwd_plan(windowed(plan_call(128, 1000, sk), 200, -1)), tiles(128, 128, 128, 2, false, true));
  }
}

// d192 (head_dim_v 192: 112 keys; up to 128: 128; ping-pong) and d256 (80 keys, no ping-pong).
TEST(Fa3FwdPlan, D192AndD256Tiles) {
  for (const AttnProblem& call : {plan_call(192, 512, 512), plan_call(160, 4096, 4096), causal(plan_call(192, 2048, 2048))})
    EXPECT_EQ(fwd_plan(call), tiles(192, 192, 112, 2, true, true)) << test::describe(call);
  for (const AttnProblem& call : {with_dims(192, 128, 512, 512), with_dims(192, 96, 4096, 4096)})
    EXPECT_EQ(fwd_plan(call), tiles(192, 128, 128, 2, true, true)) << test::describe(call);
  for (const AttnProblem& call : {plan_call(256, 512, 512), plan_call(200, 16384, 16384)})
    EXPECT_EQ(fwd_plan(call), tiles(256, 256, 80, 2, false, true)) << test::describe(call);
  for (const AttnProblem& call : {causal(plan_call(256, 512, 512)), windowed(plan_call(256, 2048, 2048), 300, 0)})
    EXPECT_EQ(fwd_plan(call), tiles(256, 256, 80, 2, false, true)) << test::describe(call);
  EXPECT_EQ(fwd_plan(varlen(plan_call(256, 700, 700))), tiles(256, 256, 80, 2, false, false));
}

// Softcap, ALiBi, scale <= 0: two consumers, no ping-pong, 128 keys (d192: 96, d256: 64).
TEST(Fa3FwdPlan, GeneralScores) {
  const std::tuple<int, int, FwdPlan> cases[] = {
      {64, 64, tiles(64, 64, 128, 2, false, false, true)},      {128, 128, tiles(128, 128, 128, 2, false, true, true)},
      {192, 128, tiles(192, 128, 128, 2, false, true, true)},   {192, 192, tiles(192, 192, 96, 2, false, true, true)},
      {256, 256, tiles(256, 256, 64, 2, false, true, true)},
  };
  for (const auto& [d, dv, want] : cases)
    for (int64_t seqlen : {512, 4096, 16384}) {
      const AttnProblem base = with_dims(d, dv, seqlen, seqlen);
      for (const AttnProblem& call : {test::with_softcap(base), test::with_alibi(base), test::with_negative_scale(base),
                                      causal(test::with_softcap(base))})
        EXPECT_EQ(fwd_plan(call), want) << test::describe(call);
    }
}

TEST(Fa3FwdPlan, DefaultPlansPassTheirCheck) {
  std::set<std::tuple<int, int, int, int, bool, bool>> seen;
  for (const FwdKernelShape& k : kFwdKernels)
    EXPECT_TRUE(seen.insert({k.head_dim, k.head_dim_v, k.block_n, k.consumers, k.general_score, k.pingpong}).second)
        << "kernel listed twice: d" << k.head_dim << " " << k.block_n;
  for (auto [d, dv] : {std::pair{64, 64}, {128, 128}, {192, 128}, {192, 192}, {256, 256}, {40, 40}, {100, 100}})
    for (int64_t sk : {1, 100, 700, 1024, 2048, 2304, 2500, 8192})
      for (int64_t sq : {1, 300, 2048}) {
        const AttnProblem base = with_dims(d, dv, sq, sk);
        for (const AttnProblem& call : {base, causal(base), windowed(base, 10, 10), varlen(base), test::with_softcap(base),
                                        test::with_alibi(causal(base))}) {
          EXPECT_TRUE(check_fwd_plan(fwd_plan(call), call).ok()) << test::describe(call);
          EXPECT_EQ(fwd_plan(call).section_mb, 16);
        }
      }
}

TEST(Fa3FwdPlan, ForcedPlansAreChecked) {
  const AttnProblem d64 = plan_call(64, 4096, 4096), d128 = plan_call(128, 4096, 4096);
  // Other tiles than the rule's, where the call can take them.
  EXPECT_TRUE(check_fwd_plan(tiles(64, 64, 128, 2, true, false), d64).ok());
  EXPECT_TRUE(check_fwd_plan(tiles(64, 64, 128, 3, true, true), d64).ok());  // TMA stores at d64
  EXPECT_TRUE(check_fwd_plan(tiles(128, 128, 144, 2, true, true), d128).ok());
  EXPECT_TRUE(check_fwd_plan(tiles(128, 128, 128, 2, false, false), causal(d128)).ok());
  EXPECT_TRUE(check_fwd_plan(tiles(256, 256, 80, 2, false, false), plan_call(256, 512, 512)).ok());
  // Measured slower and deleted (docs/PERF.md): d64 without ping-pong, and on 192 keys with P
  // through shared memory; d128 128 and 176 keys and d256 with ping-pong; d128 144 keys without.
  for (const auto& [plan, call] : {std::pair{tiles(64, 64, 128, 3, false, false), d64}, {tiles(64, 64, 192, 3, true, false), d64},
                                   {tiles(128, 128, 176, 2, true, true), d128}, {tiles(128, 128, 144, 2, false, true), d128},
                                   {tiles(128, 128, 128, 2, true, false), causal(d128)},
                                   {tiles(256, 256, 80, 2, true, true), plan_call(256, 512, 512)}})
    EXPECT_TRUE(FailsWith(check_fwd_plan(plan, call), ErrorCode::InvalidArgument, "plan", "names no built kernel"));
  // The wide d128 key tiles take calls without causal or window limits only.
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(128, 128, 176, 2, false, true), windowed(d128, 10, 10)),
                        ErrorCode::InvalidArgument, "plan", "without causal or window limits"));
  // TMA stores on a varlen call; the call's head dims and score path; sections.
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(128, 128, 176, 2, false, true), varlen(d128)), ErrorCode::InvalidArgument, "plan",
                        "dense calls only"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(128, 128, 128, 2, false, true), d64), ErrorCode::InvalidArgument, "plan",
                        "has head dims 128 / 128, the call runs at 64 / 64"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(128, 128, 176, 2, false, true), test::with_softcap(d128)),
                        ErrorCode::InvalidArgument, "plan", "another score path"));
  FwdPlan sections = fwd_plan(causal(d128));
  sections.section_mb = 0;
  EXPECT_TRUE(check_fwd_plan(sections, causal(d128)).ok());
  sections.section_mb = -1;
  EXPECT_TRUE(FailsWith(check_fwd_plan(sections, causal(d128)), ErrorCode::InvalidArgument, "plan", "negative section"));
}

#if defined(FLASHATTN_WITH_CUDA)
// The fp8 forward's tiles (src/fa3/fp8_fwd_launch.cu): FA3's d64 192 x 160, d128 128 x 224 (from
// 1k keys where it pads at most 4 % more than 128, else 128 x 128) and d256 128 x 128, each without
// ping-pong.
TEST(Fa3Fp8FwdPlan, TilesAndPingPong) {
  const auto fp8 = [](AttnProblem p) {
    p.dtype = DType::F8E4M3;
    return p;
  };
  struct Want {
    int head_dim, block_m, block_n;
    bool pingpong;
  };
  const std::tuple<AttnProblem, Want> calls[] = {
      {plan_call(64, 2048, 2048), {64, 192, 160, false}},     {plan_call(128, 2048, 4096), {128, 128, 224, false}},
      {plan_call(128, 2048, 2048), {128, 128, 128, false}},   {plan_call(128, 512, 512), {128, 128, 128, false}},
      {causal(plan_call(128, 8192, 8192)), {128, 128, 224, false}}, {plan_call(256, 2048, 2048), {256, 128, 128, false}},
      {causal(plan_call(256, 4096, 4096)), {256, 128, 128, false}},
  };
  for (const auto& [call, want] : calls) {
    const Fp8FwdPlan plan = fp8_fwd_plan(fp8(call));
    EXPECT_EQ(plan.head_dim, want.head_dim) << test::describe(call);
    EXPECT_EQ(plan.block_m, want.block_m) << test::describe(call);
    EXPECT_EQ(plan.block_n, want.block_n) << test::describe(call);
    EXPECT_EQ(plan.pingpong, want.pingpong) << test::describe(call);
    EXPECT_TRUE(check_fp8_fwd_plan(plan, fp8(call)).ok()) << test::describe(call);
  }
}
#endif

}  // namespace
}  // namespace flashattn::fa3
