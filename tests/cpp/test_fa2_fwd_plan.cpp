// The FA2 forward's plan (src/fa2/fwd_plan.h), host-only: the kernel each call runs on the pinned
// devices (today's rules, written out per case), the checks of forced plans, and the split-KV rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <set>
#include <tuple>

#include "fa2/fwd_plan.h"
#include "plan_test_util.h"

namespace flashattn::fa2 {

std::ostream& operator<<(std::ostream& os, const FwdPlan& p) {
  return os << "{d" << p.head_dim << " " << p.block_m << "x" << p.block_n << " " << p.warps << " warps"
            << (p.dropout ? " dropout" : "") << (p.general_score ? " general" : " plain")
            << (p.stage_pages ? " staged pages" : "") << (p.pack_gqa_queries ? " packed query heads" : "")
            << (p.split_in_cluster ? " splits in clusters" : "") << "}";
}

namespace {

using test::causal;
using test::FailsWith;
using test::kA100;
using test::kH200;
using test::kSm86;
using test::paged;
using test::plan_call;
using test::varlen;
using test::windowed;
using test::with_alibi;
using test::with_dropout;
using test::with_negative_scale;
using test::with_softcap;

FwdPlan tiles(int head_dim, int block_m, int block_n, int warps, bool general = false, bool dropout = false) {
  FwdPlan p;
  p.head_dim = head_dim;
  p.block_m = block_m;
  p.block_n = block_n;
  p.warps = warps;
  p.general_score = general;
  p.dropout = dropout;
  return p;
}
FwdPlan staged(FwdPlan p) {
  p.stage_pages = true;
  return p;
}

// The base tiles by head dim (head dims between the built ones run padded to the next).
TEST(Fa2FwdPlan, PlainDenseCallsTakeTheBaseTilesBelowD256) {
  const std::tuple<int, FwdPlan> cases[] = {
      {32, tiles(32, 128, 64, 4)},   {48, tiles(64, 128, 64, 4)},   {64, tiles(64, 128, 64, 4)},
      {80, tiles(96, 128, 32, 4)},   {96, tiles(96, 128, 32, 4)},   {112, tiles(128, 128, 32, 4)},
      {128, tiles(128, 128, 32, 4)}, {160, tiles(160, 64, 32, 4)},  {176, tiles(192, 64, 32, 4)},
      {192, tiles(192, 64, 32, 4)},  {224, tiles(224, 64, 32, 4)},
  };
  for (const auto& [d, want] : cases)
    for (const DeviceLimits& device : {kH200, kA100, kSm86, test::h200_as_sm80_build()})
      for (const AttnProblem& call : {plan_call(d, 512, 512), causal(plan_call(d, 2048, 2048)), varlen(plan_call(d, 300, 700)),
                                      windowed(plan_call(d, 1000, 1000), 100, 0)}) {
        EXPECT_EQ(fwd_plan(call, device), want) << test::describe(call) << ", sm" << device.arch;
        EXPECT_EQ(fwd_base_plan(call, device), want) << test::describe(call);
      }
}

// d256 (and d225..255) on 128 x 64 with 8 warps where the GPU has 198 KB per block: sm90 only.
TEST(Fa2FwdPlan, D256TakesTheWideTilesOnSm90Only) {
  for (int d : {240, 256})
    for (const AttnProblem& call : {plan_call(d, 512, 512), causal(plan_call(d, 8192, 8192)), varlen(plan_call(d, 300, 700)),
                                    plan_call(d, 17, 4000)}) {
      EXPECT_EQ(fwd_plan(call, kH200), tiles(256, 128, 64, 8)) << test::describe(call);
      EXPECT_EQ(fwd_base_plan(call, kH200), tiles(256, 64, 32, 4)) << test::describe(call);
      for (const DeviceLimits& device : {kA100, kSm86, test::h200_as_sm80_build()})
        EXPECT_EQ(fwd_plan(call, device), tiles(256, 64, 32, 4)) << test::describe(call) << ", sm" << device.arch;
    }
}

FwdPlan in_clusters(FwdPlan p) {
  p.split_in_cluster = true;
  return p;
}

// At most 16 query rows per head (after pack-GQA): the decode tiles (16 x 64 with key-split warps
// up to d128, their splits in clusters on sm90; d256's 64 x 64 only where its 165 KB fit, sm90:
// sm80 and sm86 keep the base tiles).
TEST(Fa2FwdPlan, DecodingTakesTheDecodeTiles) {
  const std::tuple<int, FwdPlan, FwdPlan> cases[] = {
      // d, H200, A100 / sm86 / the sm80 build
      {32, in_clusters(tiles(64, 16, 64, 4)), tiles(64, 16, 64, 4)},
      {64, in_clusters(tiles(64, 16, 64, 4)), tiles(64, 16, 64, 4)},
      {96, in_clusters(tiles(128, 16, 64, 4)), tiles(128, 16, 64, 4)},
      {128, in_clusters(tiles(128, 16, 64, 4)), tiles(128, 16, 64, 4)},
      {160, tiles(256, 64, 64, 4), tiles(160, 64, 32, 4)},   {192, tiles(256, 64, 64, 4), tiles(192, 64, 32, 4)},
      {224, tiles(256, 64, 64, 4), tiles(224, 64, 32, 4)},   {256, tiles(256, 64, 64, 4), tiles(256, 64, 32, 4)},
  };
  for (const auto& [d, on_h200, on_sm80] : cases) {
    const AttnProblem calls[] = {
        plan_call(d, 1, 8192, 32, 8),             // pack-GQA: 4 rows of each KV head
        plan_call(d, 1, 8192, 32, 2),             // 16 rows
        plan_call(d, 1, 100, 8, 8),               // MHA: one row
        causal(plan_call(d, 4, 3000, 32, 8)),     // a few query rows
        causal(plan_call(d, 16, 3000, 16, 4)),
        windowed(plan_call(d, 1, 900, 16, 4), 100, 0),  // a left window: not packed, one row
        varlen(plan_call(d, 8, 900, 16, 4)),      // varlen queries of at most 8 rows
    };
    // The tiles without packed query heads (fwd_plan packs the GQA calls of 2-16 queries on
    // these same tiles: test_fa2_fwd_pack_queries_plan.cpp).
    for (const AttnProblem& call : calls) {
      EXPECT_EQ(fwd_plan_rows(call, kH200), on_h200) << test::describe(call);
      for (const DeviceLimits& device : {kA100, kSm86, test::h200_as_sm80_build()})
        EXPECT_EQ(fwd_plan_rows(call, device), on_sm80) << test::describe(call) << ", sm" << device.arch;
    }
  }
}

TEST(Fa2FwdPlan, MoreThanSixteenRowsLeaveTheDecodeTiles) {
  // 17 query rows; and one query row of 32 query heads per KV head (pack-GQA makes 32 rows).
  for (const AttnProblem& call : {causal(plan_call(128, 17, 3000, 16, 4)), plan_call(128, 1, 8192, 64, 2)}) {
    EXPECT_EQ(fwd_plan(call, kH200), tiles(128, 128, 32, 4)) << test::describe(call);
    EXPECT_EQ(fwd_plan(call, kA100), tiles(128, 128, 32, 4)) << test::describe(call);
  }
  EXPECT_EQ(fwd_plan(plan_call(256, 1, 8192, 64, 2), kH200), tiles(256, 128, 64, 8));
  EXPECT_EQ(fwd_plan(plan_call(256, 1, 8192, 64, 2), kSm86), tiles(256, 64, 32, 4));
}

// Softcap, ALiBi and scale <= 0: the general kernels on the base tiles, never the decode or wide
// ones.
TEST(Fa2FwdPlan, GeneralScoresTakeTheBaseTiles) {
  const std::tuple<int, FwdPlan> cases[] = {
      {32, tiles(32, 128, 64, 4, true)},  {64, tiles(64, 128, 64, 4, true)},  {96, tiles(96, 128, 32, 4, true)},
      {128, tiles(128, 128, 32, 4, true)}, {160, tiles(160, 64, 32, 4, true)}, {256, tiles(256, 64, 32, 4, true)},
  };
  for (const auto& [d, want] : cases)
    for (const DeviceLimits& device : {kH200, kA100, kSm86})
      for (const AttnProblem& call : {with_softcap(plan_call(d, 2048, 2048)), with_alibi(plan_call(d, 1, 4096, 32, 8)),
                                      with_negative_scale(plan_call(d, 1, 4096)), with_softcap(plan_call(d, 1, 4096, 32, 8))})
        EXPECT_EQ(fwd_plan(call, device), want) << test::describe(call) << ", sm" << device.arch;
}

// Dropout: its own kernels, smaller tiles where the Philox state would spill.
TEST(Fa2FwdPlan, DropoutTakesItsTiles) {
  const std::tuple<int, FwdPlan> cases[] = {
      {32, tiles(32, 128, 32, 4, true, true)},  {64, tiles(64, 128, 32, 4, true, true)},
      {96, tiles(96, 64, 32, 4, true, true)},   {128, tiles(128, 64, 32, 4, true, true)},
      {160, tiles(160, 64, 32, 4, true, true)}, {192, tiles(192, 64, 32, 4, true, true)},
      {224, tiles(224, 64, 32, 4, true, true)}, {256, tiles(256, 64, 32, 4, true, true)},
  };
  for (const auto& [d, want] : cases)
    for (const DeviceLimits& device : {kH200, kA100, kSm86})
      for (const AttnProblem& call : {with_dropout(plan_call(d, 2048, 2048)), with_dropout(plan_call(d, 1, 4096, 32, 8)),
                                      with_softcap(with_dropout(plan_call(d, 300, 300)))})
        EXPECT_EQ(fwd_plan(call, device), want) << test::describe(call) << ", sm" << device.arch;
}

// Paged K/V stage each tile's pages in shared memory wherever the kernel leaves room for them:
// everywhere but d256 on sm86 (the base tiles take all 99 KB there).
TEST(Fa2FwdPlan, PagedCallsStagePagesWhereTheyFit) {
  EXPECT_EQ(fwd_plan(paged(plan_call(128, 512, 4096)), kH200), staged(tiles(128, 128, 32, 4)));
  EXPECT_EQ(fwd_plan(paged(plan_call(256, 512, 4096)), kH200), staged(tiles(256, 128, 64, 8)));
  EXPECT_EQ(fwd_plan(paged(plan_call(256, 1, 4096, 32, 8)), kH200), staged(tiles(256, 64, 64, 4)));
  EXPECT_EQ(fwd_plan(paged(plan_call(256, 512, 4096)), kA100), staged(tiles(256, 64, 32, 4)));
  EXPECT_EQ(fwd_plan(paged(plan_call(128, 1, 4096, 32, 8)), kSm86), staged(tiles(128, 16, 64, 4)));
  // (paged decode splits through global memory on sm90 too: in clusters it measured slower)
  EXPECT_EQ(fwd_plan(paged(plan_call(128, 1, 4096, 32, 8)), kH200), staged(tiles(128, 16, 64, 4)));
  EXPECT_EQ(fwd_plan(paged(plan_call(224, 512, 4096)), kSm86), staged(tiles(224, 64, 32, 4)));
  EXPECT_EQ(fwd_plan(paged(plan_call(256, 512, 4096)), kSm86), tiles(256, 64, 32, 4));
  EXPECT_EQ(fwd_plan(paged(plan_call(256, 1, 4096, 32, 8)), kSm86), tiles(256, 64, 32, 4));
  EXPECT_EQ(fwd_plan(paged(with_dropout(plan_call(64, 512, 4096))), kSm86), staged(tiles(64, 128, 32, 4, true, true)));
}

TEST(Fa2FwdPlan, SharedMemoryOfTheTiles) {
  EXPECT_EQ(fwd_smem_bytes(tiles(256, 64, 64, 4)), 165 * 1024);
  EXPECT_EQ(fwd_smem_bytes(tiles(256, 128, 64, 8)), 198 * 1024);
  EXPECT_EQ(fwd_smem_bytes(tiles(256, 64, 32, 4)), 99 * 1024);
  EXPECT_EQ(fwd_pages_smem_bytes(tiles(256, 64, 32, 4)), 512);  // page and row of 2 x 32 rows
}

// Every plan the rules make runs on its device; the kernel list has no duplicates.
TEST(Fa2FwdPlan, DefaultPlansPassTheirCheck) {
  std::set<std::tuple<int, int, int, int, bool, bool>> seen;
  for (const FwdKernelShape& k : kFwdKernels)
    EXPECT_TRUE(seen.insert({k.head_dim, k.block_m, k.block_n, k.warps, k.dropout, k.general_score}).second)
        << "kernel listed twice: d" << k.head_dim << " " << k.block_m << "x" << k.block_n;
  for (int d = 8; d <= 256; d += 8)
    for (int64_t sq : {1, 4, 16, 17, 1000})
      for (const DeviceLimits& device : {kH200, kA100, kSm86, test::h200_as_sm80_build()}) {
        const AttnProblem base = plan_call(d, sq, 3000, 32, 8);
        for (const AttnProblem& call : {base, causal(base), with_softcap(base), with_dropout(base), paged(base),
                                        varlen(base), with_alibi(paged(base))}) {
          EXPECT_TRUE(check_fwd_plan(fwd_plan(call, device), call, device).ok()) << test::describe(call) << ", sm" << device.arch;
          EXPECT_TRUE(check_fwd_plan(fwd_base_plan(call, device), call, device).ok()) << test::describe(call);
        }
      }
}

TEST(Fa2FwdPlan, ForcedPlansAreChecked) {
  const AttnProblem d256 = plan_call(256, 2048, 2048);
  // The base tiles on an H200 (what sm80 runs) and the wide tiles where they do not fit.
  EXPECT_TRUE(check_fwd_plan(tiles(256, 64, 32, 4), d256, kH200).ok());
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(256, 128, 64, 8), d256, kA100), ErrorCode::Unsupported, "q",
                        "needs 202752 bytes of shared memory per block, the GPU has 166912"));
  // Tiles no kernel has (the 8-warp d64 tiles were measured and deleted; docs/PERF.md).
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(64, 128, 64, 8), plan_call(64, 512, 512), kH200), ErrorCode::InvalidArgument,
                        "plan", "names no built kernel"));
  // Another score path than the call's, a head dim below the call's.
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(128, 128, 32, 4), with_softcap(plan_call(128, 512, 512)), kH200),
                        ErrorCode::InvalidArgument, "plan", "another score path"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(128, 64, 32, 4, true, true), plan_call(128, 512, 512), kH200),
                        ErrorCode::InvalidArgument, "plan", "another score path"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(tiles(64, 128, 64, 4), plan_call(96, 512, 512), kH200), ErrorCode::InvalidArgument,
                        "plan", "has head dim 64, the call needs 96"));
  // A larger head dim runs padded (as the decode tiles do).
  EXPECT_TRUE(check_fwd_plan(tiles(256, 64, 32, 4), plan_call(160, 512, 512), kH200).ok());
  // Staged pages need a block table and the shared memory for them.
  EXPECT_TRUE(FailsWith(check_fwd_plan(staged(tiles(128, 128, 32, 4)), plan_call(128, 512, 512), kH200),
                        ErrorCode::InvalidArgument, "plan", "without a block table"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(staged(tiles(256, 64, 32, 4)), paged(d256), kSm86), ErrorCode::InvalidArgument,
                        "plan", "lacks the shared memory"));
  EXPECT_TRUE(check_fwd_plan(tiles(256, 64, 32, 4), paged(d256), kH200).ok());  // per-thread table reads
}

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

// Memory-bound decode tiles past one wave (396 slots: 3 CTAs on 132 SMs, 64-key tiles): the fewest
// splits that make four waves, each split keeping 32 tiles.
TEST(Fa2FwdPlan, DecodeTilesSplitIntoFourWaves) {
  const auto decode = [](int64_t ctas, int64_t keys) {
    return SplitInputs{ctas, keys, 64, 132, 3, true};
  };
  EXPECT_EQ(choose_fwd_splits(decode(1024, 8192)), 2);  // batch 128 x 8 KV heads
  EXPECT_EQ(choose_fwd_splits(decode(512, 8192)), 4);   // batch 64
  EXPECT_EQ(choose_fwd_splits(decode(512, 4096)), 2);   // 32 tiles a split at most
  EXPECT_EQ(choose_fwd_splits(decode(2048, 8192)), 1);  // four waves already
  EXPECT_EQ(choose_fwd_splits(decode(400, 1024)), 1);   // too few tiles to split
  EXPECT_EQ(choose_fwd_splits(decode(396, 1 << 20)), 4);
  SplitInputs prefill = decode(512, 8192);
  prefill.memory_bound = false;
  EXPECT_EQ(choose_fwd_splits(prefill), 1);
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

// Batch 1, 8 KV heads, 8k keys (128 tiles) on 132 SMs x 3: 42 splits would give 32 parts of four
// tiles and ten empty ones; 43 give parts of three.
TEST(Fa2FwdPlan, SplitsThatLeavePartsAsLongAreSkipped) {
  EXPECT_FALSE(split_shortens_parts(128, 42));
  EXPECT_TRUE(split_shortens_parts(128, 43));
  EXPECT_TRUE(split_shortens_parts(128, 1));
  EXPECT_FALSE(split_shortens_parts(4, 3));  // 2 + 2 + 0
  EXPECT_EQ(choose_fwd_splits(SplitInputs{8, 8192, 64, 132, 3, true}), 43);
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
      const int64_t tiles = keys / 64;
      double best = 0;
      for (int s = 1; s <= allowed; ++s)
        if (split_shortens_parts(tiles, s)) best = std::max(best, efficiency(in, s));
      EXPECT_LE(chosen, allowed);
      EXPECT_TRUE(split_shortens_parts(tiles, chosen)) << ctas << " CTAs, " << keys << " keys: " << chosen;
      EXPECT_GE(efficiency(in, chosen), 0.85 * best) << ctas << " CTAs, " << keys << " keys: " << chosen;
      // No split is left without keys (split_key_range's parts of ceil(tiles / chosen) tiles).
      EXPECT_LT((chosen - 1) * ((tiles + chosen - 1) / chosen), tiles) << ctas << " CTAs, " << keys << " keys";
    }
}

}  // namespace
}  // namespace flashattn::fa2
