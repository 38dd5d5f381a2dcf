// FA3 forward (head dims up to 256, dense and varlen) against the naive reference over the part of the feature
// sweep it supports. Skips without an sm90 GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_case.h"
#include "device_mirror.h"
#include "forced_plans.h"
#include "forward_race.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

// The head-dim pairs the FA3 forward runs: both in one size class (<= 64, <= 128, <= 192, <= 256),
// or <= 192 with a value head dim <= 128.
bool fa3_head_dims(int d, int dv) {
  auto size_class = [](int x) { return (x + 63) / 64; };
  return size_class(d) == size_class(dv) || (size_class(d) == 3 && size_class(dv) == 2);
}

std::vector<AttentionCase> fa3_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : feature_sweep())
    if (c.dtype != DType::F32 && c.dropout_p == 0.f && c.num_splits <= 1 && fa3_head_dims(c.head_dim, c.dv()))
      cases.push_back(c);
  return cases;
}

// A change of fwd_plan's choice (fa3/fwd_plan.h) that a test forces, given the call.
using PlanChange = std::function<void(fa3::FwdPlan*, const AttnProblem& call)>;

// fwd_plan's choice changed, where the changed plan can run the call (else none).
gpu_test::Fa3FwdChoice changed_plan(PlanChange change) {
  return gpu_test::checked([change](const AttnProblem& call) {
    fa3::FwdPlan plan = fa3::fwd_plan(call);
    change(&plan, call);
    return std::optional(plan);
  });
}

// The "<= 2x the same-precision reference's error" rule for out and LSE; with a change, on the
// changed plan (the test skips calls it cannot run).
void expect_fa3_matches_reference(const AttentionCase& c, const PlanChange& change = {}) {
  AttentionRun run(c);
  gpu_test::DeviceFwd runner = gpu_test::fwd_on_device;
  if (change) {
    const gpu_test::Fa3FwdChoice choose = changed_plan(change);
    if (!choose(run.problem())) GTEST_SKIP() << "the changed plan does not run this call";
    runner = gpu_test::on_device(gpu_test::fa3_fwd_with(choose));
  }
  const FwdResult f = run.check_fwd(Backend::Fa3, runner);
  expect_within(f.out, 2.0, rounding_floor(c.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

class Fa3Forward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa3Forward, MatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_matches_reference(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa3Forward, ::testing::ValuesIn(fa3_sweep()), ParamTestName());

// FP8: test_fa3_fp8.cu.

// The size rules (fa3/fwd_plan.h) give the wide tiles only to long sequences, which the sweep
// has few of: its d64 and d128 cases again with each tile forced (three consumer warpgroups,
// 192 x 128, or two at d64; 144 or 176 keys at d128 without causal or window limits). Calls with
// softcap or ALiBi keep their tiles.
class Fa3ForwardWideTiles : public ::testing::TestWithParam<AttentionCase> {};

PlanChange tiles(int d64_consumers, int d128_block_n) {
  return [=](fa3::FwdPlan* p, const AttnProblem& call) {
    if (p->general_score) return;
    if (p->head_dim == 64) {
      p->consumers = d64_consumers;
      p->block_n = 128;
    }
    if (p->head_dim == 128 && !call.mask.limits_keys()) {
      p->block_n = d128_block_n;
      p->pingpong = fa3::fwd_pingpong(128, d128_block_n);  // the tile's kernel (only 144 keys takes turns)
    }
  };
}

void expect_matches_with_tiles(const AttentionCase& c, int d64_consumers, int d128_block_n) {
  expect_fa3_matches_reference(c, tiles(d64_consumers, d128_block_n));
}

TEST_P(Fa3ForwardWideTiles, MatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_matches_with_tiles(GetParam(), 3, 144);
}

// With d64 on two consumer warpgroups (128 x 128), the tile the size rule gives short sequences.
TEST_P(Fa3ForwardWideTiles, WidestMatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_matches_with_tiles(GetParam(), 2, 176);
}

std::vector<AttentionCase> fa3_narrow_head_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : fa3_sweep())
    if (c.head_dim <= 128 && c.dv() <= 128) cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa3ForwardWideTiles, ::testing::ValuesIn(fa3_narrow_head_sweep()), ParamTestName());

// More work tiles than SMs: a dense unmasked call runs persistent CTAs that each take several
// tiles (the Q buffer and the K/V rings carry over from one tile to the next).
std::vector<AttentionCase> persistent_cases() {
  std::vector<AttentionCase> cases;
  for (auto [d, dv] : {std::pair{64, 64}, std::pair{128, 128}, std::pair{192, 128}, std::pair{192, 192}, std::pair{256, 256}}) {
    AttentionCase c;
    c.batch = 3;
    c.heads_q = 24;
    c.heads_k = 6;
    c.seqlen_q = 300;  // 3 row blocks (2 at d64's 192 rows): 216 (144) work tiles, the last block ragged
    c.seqlen_k = 700;
    c.head_dim = d;
    c.head_dim_v = dv;
    cases.push_back(c);
  }
  AttentionCase f16 = cases[1];
  f16.dtype = DType::F16;
  f16.seqlen_k = 2304;  // a multiple of 144: the wide d128 tile
  cases.push_back(f16);
  return cases;
}

class Fa3ForwardPersistent : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa3ForwardPersistent, MatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_matches_reference(GetParam());
}

// Ping-pong forced each way, where the kernel is built (d64 has none without it; d128 other than
// 144 keys and d256 none with it: those calls skip).
void force_pingpong(fa3::FwdPlan* p, bool on) {
  if (!p->general_score) p->pingpong = on;
}

TEST_P(Fa3ForwardPersistent, PingPongOffMatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_matches_reference(GetParam(), [](fa3::FwdPlan* p, const AttnProblem&) { force_pingpong(p, false); });
}

TEST_P(Fa3ForwardPersistent, PingPongOnMatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_matches_reference(GetParam(), [](fa3::FwdPlan* p, const AttnProblem&) { force_pingpong(p, true); });
}

// O stored each way: from registers, and staged in the V ring for TMA stores (each CTA's next tile
// then waits for the stores before loading V). The default takes TMA stores on dense calls from
// a value head dim of 128.
TEST_P(Fa3ForwardPersistent, RegisterStoresMatchReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_matches_reference(GetParam(), [](fa3::FwdPlan* p, const AttnProblem&) { p->tma_store_o = false; });
}

TEST_P(Fa3ForwardPersistent, TmaStoresMatchReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_matches_reference(GetParam(), [](fa3::FwdPlan* p, const AttnProblem&) { p->tma_store_o = true; });
}

INSTANTIATE_TEST_SUITE_P(Grid, Fa3ForwardPersistent, ::testing::ValuesIn(persistent_cases()), ParamTestName());

// Causal, windowed, varlen and seqused_k calls with more work tiles than SMs on persistent CTAs
// that take their tiles from the counter (the dynamic schedule), in sections of each size: the
// persistent grid's cases with a mask, a grid of exactly two full waves and a ragged one, and
// varlen batches whose tiles outnumber the SMs (empty sequences, a sequence shorter than a block).
std::vector<AttentionCase> unequal_tile_cases() {
  std::vector<AttentionCase> cases;
  for (AttentionCase c : persistent_cases()) {
    c.causal = true;
    cases.push_back(c);
  }
  AttentionCase window = persistent_cases()[1];
  window.window_left = 200;
  window.window_right = 30;
  cases.push_back(window);
  // Windows wider than any sequence on one side (the launch narrows them for the kernel's 32-bit
  // mask): left with more queries than keys (diag - left would overflow for the first rows),
  // right with more keys than queries.
  AttentionCase wide_left = window;
  wide_left.window_left = INT_MAX;
  wide_left.window_right = 3;
  std::swap(wide_left.seqlen_q, wide_left.seqlen_k);
  cases.push_back(wide_left);
  window.window_left = 100;
  window.window_right = INT_MAX - 1;
  cases.push_back(window);
  AttentionCase waves = persistent_cases()[1];
  waves.batch = 1;
  waves.heads_q = 66;
  waves.heads_k = 66;
  waves.seqlen_q = waves.seqlen_k = 512;  // 4 row blocks x 66 heads = 264 tiles: two waves on an H200 (132 SMs)
  waves.causal = true;
  cases.push_back(waves);
  waves.seqlen_q = 300;  // 3 x 66 = 198: one full wave and a partial one
  cases.push_back(waves);
  for (int d : {64, 128, 256}) {
    AttentionCase varlen;
    varlen.batch = 5;
    varlen.heads_q = 32;
    varlen.heads_k = 8;
    varlen.head_dim = d;
    varlen.varlen_q = {700, 0, 90, 513, 260};  // 4 row blocks of the longest: 640 tiles, 5 valid per 16
    varlen.varlen_k = {650, 33, 90, 1100, 260};
    varlen.causal = d == 128;
    cases.push_back(varlen);
  }
  AttentionCase used = persistent_cases()[1];
  used.seqused_k = {700, 310, 1};
  cases.push_back(used);
  // d256 (O by TMA stores) with a sequence of no keys: its tiles have no key tiles, so no V load
  // comes between their epilogues' stores.
  AttentionCase unused = persistent_cases()[4];
  unused.seqused_k = {0, 700, 350};
  cases.push_back(unused);
  return cases;
}

class Fa3ForwardUnequalTiles : public ::testing::TestWithParam<AttentionCase> {};

void expect_matches_on_dynamic_schedule(const AttentionCase& c, int section_mb) {
  expect_fa3_matches_reference(c, [section_mb](fa3::FwdPlan* p, const AttnProblem&) { p->section_mb = section_mb; });
}

TEST_P(Fa3ForwardUnequalTiles, DynamicScheduleMatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_matches_on_dynamic_schedule(GetParam(), 0);
}

// Sections of a few heads (the last one short for some cases): the order within a section.
TEST_P(Fa3ForwardUnequalTiles, DynamicSectionsMatchReference) {
  SKIP_WITHOUT_SM90();
  expect_matches_on_dynamic_schedule(GetParam(), 1);
}

INSTANTIATE_TEST_SUITE_P(Grid, Fa3ForwardUnequalTiles, ::testing::ValuesIn(unequal_tile_cases()), ParamTestName());

// A race shows as results that move between runs: persistent (several tiles per CTA) at d128
// (the 144- and 176-key tiles), d64 (three consumer warpgroups) and d256 (O's staging area spans
// both V stages), and causal on the dynamic schedule (the order of the tiles moves between runs;
// the results must not).
TEST(Fa3ForwardRace, HundredRunsAreBitwiseEqual) {
  SKIP_WITHOUT_SM90();
  for (auto [d, causal, sk] : {std::tuple{128, false, 2304}, std::tuple{128, false, 2816}, std::tuple{64, false, 2304},
                               std::tuple{64, false, 2300}, std::tuple{256, false, 1300}, std::tuple{128, true, 1500}}) {
    AttentionCase c;
    c.batch = 2;
    c.seqlen_q = 1000;
    c.seqlen_k = sk;
    c.heads_q = 16;
    c.heads_k = 4;
    c.head_dim = d;
    c.causal = causal;
    SCOPED_TRACE(c.name());
    // At d64 three consumers (the size rule would give two); elsewhere the rule's tiles (d128:
    // 144 keys for 2304, 176 for 2816).
    const gpu_test::Fa3FwdChoice choose = changed_plan([](fa3::FwdPlan* p, const AttnProblem&) {
      if (p->head_dim == 64) p->consumers = 3;
    });
    ASSERT_TRUE(choose(AttentionRun(c).problem()));
    expect_forward_runs_bitwise_equal(c, Backend::Fa3, 100, gpu_test::fa3_fwd_with(choose));
  }
}

// A forced plan that cannot run the call is refused by name before any kernel writes an output.
TEST(Fa3ForwardPlans, PlansThatDoNotFitAreRefused) {
  SKIP_WITHOUT_SM90();
  AttentionCase c;
  c.head_dim = 64;
  c.causal = true;
  AttentionRun run(c);
  HostTensor out(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.dv()}), lse(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
  const FwdParams host = run.fwd_params(out.view(), lse.view(), Backend::Fa3);
  const fa3::FwdPlan plan = fa3::fwd_plan(run.problem());
  fa3::FwdPlan no_pingpong = plan, other_dims = plan;
  no_pingpong.pingpong = false;  // no d64 kernel without it
  other_dims.head_dim = other_dims.head_dim_v = 128;
  for (const fa3::FwdPlan& bad : {no_pingpong, other_dims}) {
    const Status st = gpu_test::fwd_on_device_via(host, gpu_test::fa3_fwd_with([bad](const AttnProblem&) { return std::optional(bad); }));
    EXPECT_EQ(st.code(), ErrorCode::InvalidArgument) << st.message();
    EXPECT_EQ(st.argument(), "plan") << st.message();
    const auto* o = static_cast<const uint8_t*>(out.data());
    EXPECT_TRUE(std::all_of(o, o + out.numel() * 2, [](uint8_t x) { return x == 0xff; })) << "out was written";
  }
}

}  // namespace
}  // namespace flashattn::test
