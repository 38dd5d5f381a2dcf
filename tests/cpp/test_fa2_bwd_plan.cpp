// The FA2 backward's plan (src/fa2/bwd_plan.h), host-only: the main kernel and the dQ adds each
// call runs with on the pinned devices (today's rules, written out per case), and the checks of
// forced plans.
#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <tuple>

#include "fa2/bwd_plan.h"
#include "plan_test_util.h"

namespace flashattn::fa2 {

std::ostream& operator<<(std::ostream& os, const BwdPlan& p) {
  return os << "{d" << p.head_dim << " " << p.block_m << " rows, " << p.key_tiles << " key tiles, " << p.stages << " stages"
            << (p.dropout ? " dropout" : "") << (p.general_score ? " general" : " plain") << (p.dq_bulk ? " bulk dQ" : "")
            << "}";
}

namespace {

using test::FailsWith;
using test::kA100;
using test::kH200;
using test::kSm86;
using test::plan_call;

BwdProblem bwd_call(const AttnProblem& fwd, bool deterministic = false) {
  BwdProblem p;
  p.fwd = fwd;
  p.dout_dtype = fwd.dtype;
  p.deterministic = deterministic;
  return p;
}

BwdPlan tiles(int head_dim, int block_m, int key_tiles, int stages, bool general = false, bool dropout = false,
              bool dq_bulk = false) {
  BwdPlan p;
  p.head_dim = head_dim;
  p.block_m = block_m;
  p.key_tiles = key_tiles;
  p.stages = stages;
  p.general_score = general;
  p.dropout = dropout;
  p.dq_bulk = dq_bulk;
  return p;
}

// Plain scores: two key tiles per warp where they fit (d64 on 128 rows per step where 190 KB fit),
// else one; d256 on one stage where two do not fit. Bulk dQ adds at d256 on sm90.
TEST(Fa2BwdPlan, PlainScoresPerDevice) {
  const std::tuple<int, BwdPlan, BwdPlan, BwdPlan> cases[] = {
      // d, H200, A100 (and the sm80 build on an H200), sm86
      {32, tiles(64, 128, 2, 2), tiles(64, 64, 2, 2), tiles(64, 64, 1, 2)},
      {64, tiles(64, 128, 2, 2), tiles(64, 64, 2, 2), tiles(64, 64, 1, 2)},
      {96, tiles(128, 64, 2, 2), tiles(128, 64, 1, 2), tiles(128, 64, 1, 2)},
      {128, tiles(128, 64, 2, 2), tiles(128, 64, 1, 2), tiles(128, 64, 1, 2)},
      {160, tiles(256, 64, 2, 2, false, false, true), tiles(256, 64, 1, 1), tiles(256, 64, 2, 2)},
      {256, tiles(256, 64, 2, 2, false, false, true), tiles(256, 64, 1, 1), tiles(256, 64, 2, 2)},
  };
  for (const auto& [d, on_h200, on_a100, on_sm86] : cases)
    for (const AttnProblem& fwd : {plan_call(d, 512, 512), test::causal(plan_call(d, 2048, 1024, 8, 2)),
                                   test::varlen(plan_call(d, 300, 700)), test::with_negative_scale(plan_call(d, 64, 64))}) {
      const BwdProblem call = bwd_call(fwd);
      EXPECT_EQ(bwd_plan(call, kH200), on_h200) << test::describe(fwd);
      EXPECT_EQ(bwd_plan(call, kA100), on_a100) << test::describe(fwd);
      EXPECT_EQ(bwd_plan(call, test::h200_as_sm80_build()), on_a100) << test::describe(fwd);
      EXPECT_EQ(bwd_plan(call, kSm86), on_sm86) << test::describe(fwd);
    }
}

// Softcap and ALiBi: one key tile (the general path spills with two); dropout likewise, and its
// kernels keep the vector atomics.
TEST(Fa2BwdPlan, GeneralScoresAndDropoutTakeOneKeyTile) {
  for (bool dropout : {false, true}) {
    const std::tuple<int, BwdPlan, BwdPlan, BwdPlan> cases[] = {
        {64, tiles(64, 64, 1, 2, true, dropout), tiles(64, 64, 1, 2, true, dropout), tiles(64, 64, 1, 2, true, dropout)},
        {128, tiles(128, 64, 1, 2, true, dropout), tiles(128, 64, 1, 2, true, dropout), tiles(128, 64, 1, 2, true, dropout)},
        {256, tiles(256, 64, 1, 2, true, dropout, !dropout), tiles(256, 64, 1, 1, true, dropout),
         tiles(256, 64, 1, 2, true, dropout)},
    };
    for (const auto& [d, on_h200, on_a100, on_sm86] : cases) {
      AttnProblem softcap = test::with_softcap(plan_call(d, 512, 512)), alibi = test::with_alibi(plan_call(d, 512, 512));
      if (dropout) {
        softcap = test::with_dropout(softcap);
        alibi = test::with_dropout(plan_call(d, 512, 512));  // dropout alone takes the general path too
      }
      for (const AttnProblem& fwd : {softcap, alibi}) {
        EXPECT_EQ(bwd_plan(bwd_call(fwd), kH200), on_h200) << test::describe(fwd);
        EXPECT_EQ(bwd_plan(bwd_call(fwd), kA100), on_a100) << test::describe(fwd);
        EXPECT_EQ(bwd_plan(bwd_call(fwd), kSm86), on_sm86) << test::describe(fwd);
      }
    }
  }
}

// The deterministic mode orders its dQ adds by key block: vector atomics behind counters.
TEST(Fa2BwdPlan, DeterministicModeKeepsTheAtomics) {
  EXPECT_EQ(bwd_plan(bwd_call(plan_call(256, 512, 512), true), kH200), tiles(256, 64, 2, 2));
  EXPECT_EQ(bwd_plan(bwd_call(test::with_softcap(plan_call(256, 512, 512)), true), kH200), tiles(256, 64, 1, 2, true));
  EXPECT_EQ(bwd_plan(bwd_call(plan_call(64, 512, 512), true), kH200), tiles(64, 128, 2, 2));
}

TEST(Fa2BwdPlan, SharedMemoryOfTheKernels) {
  EXPECT_EQ(bwd_smem_bytes(tiles(64, 128, 2, 2)), 190464);   // above an A100's 163 KB
  EXPECT_EQ(bwd_smem_bytes(tiles(64, 64, 2, 2)), 119808);    // above sm86's 99 KB
  EXPECT_EQ(bwd_smem_bytes(tiles(64, 64, 1, 2)), 93184);
  EXPECT_EQ(bwd_smem_bytes(tiles(128, 64, 2, 2)), 185344);
  EXPECT_EQ(bwd_smem_bytes(tiles(128, 64, 1, 2)), 158720);
  EXPECT_EQ(bwd_smem_bytes(tiles(256, 64, 2, 2)), 230400);   // = one key tile's: both stage P^T
  EXPECT_EQ(bwd_smem_bytes(tiles(256, 64, 1, 2)), 230400);
  EXPECT_EQ(bwd_smem_bytes(tiles(256, 64, 1, 1)), 162304);
}

// Where no kernel fits (d128 and d256 on sm86), the check answers the shared-memory error.
TEST(Fa2BwdPlan, CallsThatFitNowhereAnswerTheSharedMemoryError) {
  const BwdProblem d128 = bwd_call(plan_call(128, 512, 512)), d256 = bwd_call(plan_call(256, 512, 512));
  EXPECT_TRUE(FailsWith(check_bwd_plan(bwd_plan(d128, kSm86), d128, kSm86), ErrorCode::Unsupported, "q",
                        "needs more shared memory per block (158720 bytes) than the GPU has (101376)"));
  EXPECT_TRUE(FailsWith(check_bwd_plan(bwd_plan(d256, kSm86), d256, kSm86), ErrorCode::Unsupported, "q",
                        "needs more shared memory per block (230400 bytes) than the GPU has (101376)"));
}

TEST(Fa2BwdPlan, DefaultPlansPassTheirCheck) {
  std::set<std::tuple<int, int, int, int, bool, bool>> seen;
  for (const BwdKernelShape& k : kBwdKernels)
    EXPECT_TRUE(seen.insert({k.head_dim, k.block_m, k.key_tiles, k.stages, k.dropout, k.general_score}).second)
        << "kernel listed twice: d" << k.head_dim;
  for (int d = 8; d <= 256; d += 8)
    for (const fa2::DeviceLimits& device : {kH200, kA100, test::h200_as_sm80_build()})
      for (bool deterministic : {false, true}) {
        const AttnProblem base = plan_call(d, 700, 900, 8, 2);
        for (const AttnProblem& fwd : {base, test::causal(base), test::with_softcap(base), test::with_alibi(base),
                                       test::with_dropout(base), test::varlen(base)}) {
          const BwdProblem call = bwd_call(fwd, deterministic);
          EXPECT_TRUE(check_bwd_plan(bwd_plan(call, device), call, device).ok()) << test::describe(fwd) << ", sm" << device.arch;
        }
      }
}

TEST(Fa2BwdPlan, ForcedPlansAreChecked) {
  const BwdProblem d64 = bwd_call(plan_call(64, 512, 512)), d128 = bwd_call(plan_call(128, 512, 512));
  const BwdProblem d256 = bwd_call(plan_call(256, 512, 512));
  // What an A100 runs, forced on an H200: one key tile at d128, 64 rows per step at d64, one stage
  // at d256; bulk dQ adds at d64.
  EXPECT_TRUE(check_bwd_plan(tiles(128, 64, 1, 2), d128, kH200).ok());
  EXPECT_TRUE(check_bwd_plan(tiles(64, 64, 2, 2), d64, kH200).ok());
  EXPECT_TRUE(check_bwd_plan(tiles(256, 64, 1, 1), d256, kH200).ok());
  EXPECT_TRUE(check_bwd_plan(tiles(64, 128, 2, 2, false, false, true), d64, kH200).ok());
  // One key tile on two stages, plain d256: measured slower than two and deleted (docs/PERF.md).
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(256, 64, 1, 2), d256, kH200), ErrorCode::InvalidArgument, "plan",
                        "names no built kernel"));
  // Two key tiles on the general path; 128 rows per step at d128.
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(64, 64, 2, 2, true), bwd_call(test::with_softcap(plan_call(64, 512, 512))), kH200),
                        ErrorCode::InvalidArgument, "plan", "names no built kernel"));
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(128, 128, 2, 2), d128, kH200), ErrorCode::InvalidArgument, "plan",
                        "names no built kernel"));
  // The call's head dim and score path.
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(128, 64, 1, 2), d64, kH200), ErrorCode::InvalidArgument, "plan",
                        "has head dim 128, the call runs at 64"));
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(64, 64, 1, 2, true), d64, kH200), ErrorCode::InvalidArgument, "plan",
                        "another score path"));
  // Shared memory of the device.
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(64, 128, 2, 2), d64, kA100), ErrorCode::Unsupported, "q",
                        "(190464 bytes) than the GPU has (166912)"));
  // Bulk dQ adds: sm90, atomic mode, no dropout.
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(256, 64, 1, 1, false, false, true), d256, kA100), ErrorCode::InvalidArgument,
                        "plan", "bulk reductions"));
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(256, 64, 2, 2, false, false, true), bwd_call(plan_call(256, 512, 512), true),
                                       kH200),
                        ErrorCode::InvalidArgument, "plan", "bulk reductions"));
  EXPECT_TRUE(FailsWith(check_bwd_plan(tiles(128, 64, 1, 2, true, true, true), bwd_call(test::with_dropout(plan_call(128, 512, 512))),
                                       kH200),
                        ErrorCode::InvalidArgument, "plan", "bulk reductions"));
}

}  // namespace
}  // namespace flashattn::fa2
