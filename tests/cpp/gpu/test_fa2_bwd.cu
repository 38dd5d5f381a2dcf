// FA2 backward kernels against the naive reference (float64 and same-precision) over the feature
// sweep, in both dQ accumulation modes; bitwise reproducibility of deterministic mode; a race
// check of the atomic mode; unsupported inputs. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "attention_case.h"
#include "backward_repeat.h"
#include "device_mirror.h"
#include "fa2/bwd_tuning.h"
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

// The FA2 backward of one case against the reference, in atomic or deterministic dQ mode.
void expect_backward_matches(const AttentionCase& c, bool deterministic) {
  AttentionRun run(c);
  const BwdRunner runner = [deterministic](const BwdParams& host) {
    BwdParams p = host;
    p.deterministic = deterministic;
    return gpu_test::bwd_on_device(p);
  };
  check_gradients(c, run.check_bwd(Backend::Fa2, gpu_test::fwd_on_device, runner));
}

// Forces the backward's tuning (fa2/bwd_tuning.h) for one scope, restoring it after.
class TuningOverride {
 public:
  explicit TuningOverride(const fa2::BwdTuning& tuning) : saved_(fa2::bwd_tuning()) { fa2::bwd_tuning() = tuning; }
  ~TuningOverride() { fa2::bwd_tuning() = saved_; }
  TuningOverride(const TuningOverride&) = delete;
  TuningOverride& operator=(const TuningOverride&) = delete;

 private:
  fa2::BwdTuning saved_;
};

class Fa2Backward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa2Backward, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches(GetParam(), false);
}

// One key tile per warp (16 keys), forced: the default takes two wherever the path and the
// shared memory allow (plain scores without dropout).
TEST_P(Fa2Backward, OneKeyTileMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TuningOverride force({.key_tiles = 1});
  expect_backward_matches(GetParam(), false);
}

// d64 with two key tiles on 64 rows per step, forced (the default takes 128 where the shared
// memory allows; GPUs with less run this one).
TEST_P(Fa2Backward, ShortD64TilesMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionCase& c = GetParam();
  if (c.head_dim > 64 || c.dv() > 64) GTEST_SKIP() << "d64 kernels only";
  if (c.softcap > 0.f || c.alibi != 0 || c.dropout_p > 0.f)
    GTEST_SKIP() << "two key tiles take plain scores without dropout only";
  const TuningOverride force({.key_tiles = 2, .block_m = 64});
  expect_backward_matches(c, false);
}

// dQ tiles added by bulk reductions at every head dim (sm90; elsewhere the atomics run). The
// default takes them at d256 only.
TEST_P(Fa2Backward, BulkDqMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (GetParam().dropout_p > 0.f) GTEST_SKIP() << "the dropout kernels keep the atomics";
  const TuningOverride force({.dq_bulk = 1});
  expect_backward_matches(GetParam(), false);
}

// dQ added by vector atomics at every head dim (the default's d256 takes bulk reductions on sm90).
TEST_P(Fa2Backward, AtomicDqMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (GetParam().head_dim <= 128 && GetParam().dv() <= 128) GTEST_SKIP() << "the default already takes atomics here";
  const TuningOverride force({.dq_bulk = 0});
  expect_backward_matches(GetParam(), false);
}

// Every CTA taking its row blocks in ascending order (the default rotates the start, atomic mode).
TEST_P(Fa2Backward, InOrderRowsMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TuningOverride force({.rotate_rows = false});
  expect_backward_matches(GetParam(), false);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2Backward, ::testing::ValuesIn(gpu_sweep()), ParamTestName());

class Fa2BackwardDeterministic : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa2BackwardDeterministic, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches(GetParam(), true);
}

TEST_P(Fa2BackwardDeterministic, OneKeyTileMatchReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TuningOverride force({.key_tiles = 1});
  expect_backward_matches(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2BackwardDeterministic, ::testing::ValuesIn(deterministic_sweep()), ParamTestName());

TEST(Fa2BackwardDeterminism, FiftyRunsAreBitwiseEqual) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // d128 with one and two key tiles; d64 with two, on 128 rows per step (where the GPU allows)
  // and on 64.
  struct Variant {
    int head_dim, key_tiles, block_m;
  };
  for (auto [head_dim, key_tiles, block_m] : {Variant{128, 1, 0}, Variant{128, 2, 0}, Variant{64, 2, 0}, Variant{64, 2, 64}}) {
    SCOPED_TRACE(testing::Message() << "d" << head_dim << ", key tiles per warp " << key_tiles << ", rows per step "
                                    << (block_m == 0 ? "by the rule" : "64"));
    const TuningOverride force({.key_tiles = key_tiles, .block_m = block_m});
    AttentionCase c = two_sequences(700, 900, 8, 2, head_dim);
    c.causal = true;
    expect_backward_runs_bitwise_equal(c, Backend::Fa2, /*deterministic=*/true, 50);
  }
}

// A race shows as gradients that move between runs (backward_repeat.h).
TEST(Fa2BackwardRace, RepeatedRunsAgree) {
  SKIP_WITHOUT_CUDA_DEVICE();
  struct Variant {
    int head_dim;
    fa2::BwdTuning tuning;
    const char* what;
  };
  const Variant variants[] = {
      {128, {.key_tiles = 1}, "one key tile"},
      {128, {.key_tiles = 2}, "two key tiles"},
      {64, {.key_tiles = 2}, "two key tiles, 128 rows per step"},
      {128, {.key_tiles = 2, .rotate_rows = false}, "rows in order"},
      {128, {.key_tiles = 2, .dq_bulk = 1}, "bulk dQ adds"},
      {64, {.key_tiles = 2, .dq_bulk = 1}, "bulk dQ adds, 128 rows per step"},
      // (one key tile: the staging tile in the Q stage, refilled next step)
      {128, {.key_tiles = 1, .dq_bulk = 1}, "bulk dQ adds, one key tile"},
      {256, {}, "the default (bulk dQ adds)"},
      {256, {.dq_bulk = 0}, "vector atomics"},
  };
  for (const auto& [head_dim, tuning, what] : variants) {
    SCOPED_TRACE(testing::Message() << "d" << head_dim << ", " << what);
    const TuningOverride force(tuning);
    expect_backward_runs_agree(two_sequences(2000, 2100, 8, 4, head_dim), Backend::Fa2, 20);
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
