// FA2 backward kernels against the naive reference (float64 and same-precision) over the feature
// sweep, in both dQ accumulation modes; bitwise reproducibility of deterministic mode; a race
// check of the atomic mode; unsupported inputs. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "attention_case.h"
#include "backward_repeat.h"
#include "device_mirror.h"
#include "forced_plans.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

std::vector<AttentionCase> gpu_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : feature_sweep())
    if (c.dtype != DType::F32) cases.push_back(c);  // the FA2 kernels take fp16/bf16
  return cases;
}

// Deterministic mode orders dQ adds across key blocks; these cases have several key blocks per
// row block or several query heads per kv head (the counters' interesting cases).
std::vector<AttentionCase> deterministic_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : gpu_sweep())
    if (c.heads_q != c.heads_k || c.varlen() || c.seqlen_k > 256) cases.push_back(c);
  return cases;
}

void check_gradients(const AttentionCase& c, const BwdResult& r) {
  expect_within(r.dq, 2.0, rounding_floor(c.dtype, r.dq.reference_max), "dq");
  expect_within(r.dk, 2.0, rounding_floor(c.dtype, r.dk.reference_max), "dk");
  expect_within(r.dv, 2.0, rounding_floor(c.dtype, r.dv.reference_max), "dv");
}

// A change of bwd_plan's choice (fa2/bwd_plan.h) that a test forces.
using PlanChange = std::function<void(fa2::BwdPlan*)>;

// The changed plan where it runs the call on this GPU and differs from the default (which
// MatchesReference runs), else none.
gpu_test::Fa2BwdChoice changed_plan(PlanChange change) {
  return gpu_test::checked([change](const BwdProblem& call, const fa2::DeviceLimits& limits) -> std::optional<fa2::BwdPlan> {
    fa2::BwdPlan plan = fa2::bwd_plan(call, limits);
    const fa2::BwdPlan chosen = plan;
    change(&plan);
    if (plan == chosen) return std::nullopt;
    return plan;
  });
}

BwdProblem bwd_call(const AttentionRun& run, bool deterministic) {
  BwdProblem call;
  call.fwd = run.problem();
  call.deterministic = deterministic;
  return call;
}

// The FA2 backward of one case against the reference, in atomic or deterministic dQ mode; with a
// change, on the changed plan (the test skips calls it does not apply to).
void expect_backward_matches(const AttentionCase& c, bool deterministic, const PlanChange& change = {}) {
  AttentionRun run(c);
  gpu_test::DeviceBwd call = [](const BwdParams& d) { return bwd(d); };
  if (change) {
    const gpu_test::Fa2BwdChoice choose = changed_plan(change);
    if (!choose(bwd_call(run, deterministic), gpu_test::fa2_limits()))
      GTEST_SKIP() << "the change does not apply to this call on this GPU (or is its default)";
    call = gpu_test::fa2_bwd_with(choose);
  }
  const BwdRunner runner = [deterministic, call](const BwdParams& host) {
    BwdParams p = host;
    p.deterministic = deterministic;
    return gpu_test::bwd_on_device_via(p, call);
  };
  check_gradients(c, run.check_bwd(Backend::Fa2, gpu_test::fwd_on_device, runner));
}

void one_key_tile(fa2::BwdPlan* p) {
  p->key_tiles = 1;
  p->block_m = 64;
}

class Fa2Backward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa2Backward, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches(GetParam(), false);
}

// One key tile per warp (16 keys), forced: the default takes two wherever the path and the
// shared memory allow (plain scores without dropout; at d256 one key tile runs on one stage only).
TEST_P(Fa2Backward, OneKeyTileMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches(GetParam(), false, one_key_tile);
}

// d64 with two key tiles on 64 rows per step, forced (the default takes 128 where the shared
// memory allows; GPUs with less run this one).
TEST_P(Fa2Backward, ShortD64TilesMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionCase& c = GetParam();
  if (c.head_dim > 64 || c.dv() > 64) GTEST_SKIP() << "d64 kernels only";
  if (c.softcap > 0.f || c.alibi != 0 || c.dropout_p > 0.f)
    GTEST_SKIP() << "two key tiles take plain scores without dropout only";
  expect_backward_matches(c, false, [](fa2::BwdPlan* p) {
    p->key_tiles = 2;
    p->block_m = 64;
  });
}

// dQ tiles added by bulk reductions at every head dim (sm90; elsewhere the atomics run). The
// default takes them at d256 only.
TEST_P(Fa2Backward, BulkDqMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (GetParam().dropout_p > 0.f) GTEST_SKIP() << "the dropout kernels keep the atomics";
  expect_backward_matches(GetParam(), false, [](fa2::BwdPlan* p) { p->dq_bulk = true; });
}

// dQ added by vector atomics at every head dim (the default's d256 takes bulk reductions on sm90).
TEST_P(Fa2Backward, AtomicDqMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (GetParam().head_dim <= 128 && GetParam().dv() <= 128) GTEST_SKIP() << "the default already takes atomics here";
  expect_backward_matches(GetParam(), false, [](fa2::BwdPlan* p) { p->dq_bulk = false; });
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2Backward, ::testing::ValuesIn(gpu_sweep()), ParamTestName());

class Fa2BackwardDeterministic : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa2BackwardDeterministic, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches(GetParam(), true);
}

TEST_P(Fa2BackwardDeterministic, OneKeyTileMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches(GetParam(), true, one_key_tile);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2BackwardDeterministic, ::testing::ValuesIn(deterministic_sweep()), ParamTestName());

// The plan for a repeated-run case: bwd_plan's with `change` applied; none where that does not
// run the call on this GPU.
std::optional<gpu_test::DeviceBwd> repeat_call(const AttentionCase& c, bool deterministic, const PlanChange& change) {
  const gpu_test::Fa2BwdChoice choose = gpu_test::checked([change](const BwdProblem& call, const fa2::DeviceLimits& limits) {
    fa2::BwdPlan plan = fa2::bwd_plan(call, limits);
    if (change) change(&plan);
    return std::optional(plan);
  });
  if (!choose(bwd_call(AttentionRun(c), deterministic), gpu_test::fa2_limits())) return std::nullopt;
  return gpu_test::fa2_bwd_with(choose);
}

TEST(Fa2BackwardDeterminism, FiftyRunsAreBitwiseEqual) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // d128 with one and two key tiles; d64 with two, on 128 rows per step (where the GPU allows)
  // and on 64.
  struct Variant {
    int head_dim, key_tiles, block_m;
  };
  for (auto [head_dim, key_tiles, block_m] : {Variant{128, 1, 64}, Variant{128, 2, 64}, Variant{64, 2, 0}, Variant{64, 2, 64}}) {
    SCOPED_TRACE(testing::Message() << "d" << head_dim << ", key tiles per warp " << key_tiles << ", rows per step "
                                    << (block_m == 0 ? "by the rule" : "64"));
    AttentionCase c = two_sequences(700, 900, 8, 2, head_dim);
    c.causal = true;
    const auto call = repeat_call(c, true, [key_tiles = key_tiles, block_m = block_m](fa2::BwdPlan* p) {
      p->key_tiles = key_tiles;
      if (block_m != 0) p->block_m = block_m;
    });
    if (!call) {
      std::printf("(skipped: the variant does not fit this GPU)\n");
      continue;
    }
    expect_backward_runs_bitwise_equal(c, Backend::Fa2, /*deterministic=*/true, 50, *call);
  }
}

// A race shows as gradients that move between runs (backward_repeat.h).
TEST(Fa2BackwardRace, RepeatedRunsAgree) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Variant {
    int head_dim;
    PlanChange change;
    const char* what;
  };
  const auto tiles_and_adds = [](int key_tiles, bool bulk) {
    return [key_tiles, bulk](fa2::BwdPlan* p) {
      if (key_tiles != 0) {
        p->key_tiles = key_tiles;
        p->block_m = key_tiles == 1 ? 64 : p->block_m;
      }
      p->dq_bulk = bulk;
    };
  };
  const Variant variants[] = {
      {128, tiles_and_adds(1, false), "one key tile"},
      {128, tiles_and_adds(2, false), "two key tiles"},
      {64, tiles_and_adds(2, false), "two key tiles, 128 rows per step"},
      {128, tiles_and_adds(2, true), "bulk dQ adds"},
      {64, tiles_and_adds(2, true), "bulk dQ adds, 128 rows per step"},
      // (one key tile: the staging tile in the Q stage, refilled next step)
      {128, tiles_and_adds(1, true), "bulk dQ adds, one key tile"},
      {256, {}, "the default (bulk dQ adds on sm90)"},
      {256, tiles_and_adds(0, false), "vector atomics"},
  };
  for (const auto& [head_dim, change, what] : variants) {
    SCOPED_TRACE(testing::Message() << "d" << head_dim << ", " << what);
    const AttentionCase c = two_sequences(2000, 2100, 8, 4, head_dim);
    const auto call = repeat_call(c, false, change);
    if (!call) {
      std::printf("(skipped d%d, %s: the variant does not run on this GPU)\n", head_dim, what);
      continue;
    }
    expect_backward_runs_agree(c, Backend::Fa2, 20, *call);
  }
}

TEST(Fa2BackwardErrors, Float32InputsAreUnsupported) {
  SKIP_WITHOUT_CUDA_DEVICE();
  AttentionCase c;
  c.dtype = DType::F32;
  AttentionRun run(c);
  run.check_fwd(Backend::Cpu);  // out and lse from the host backend
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  const Status st = gpu_test::bwd_on_device(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa2));
  EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
  EXPECT_EQ(st.argument(), "q") << st.message();
}

}  // namespace
}  // namespace flashattn::test
