// FA3 backward (sm90a) against the naive reference (float64 and same-precision) over the part of
// the feature sweep it covers (head dims to 256: d256 and padded d192 on the wide kernel), in both dQ modes (bulk reductions in any order, and deterministic);
// larger grids (several key and row blocks, GQA groups, varlen with empty sequences, seqused_k
// with NaN past it); rows that see no key; extreme scores; 50-run bitwise determinism; a 100-run
// race check; Unsupported answers, a forced kernel that is not built included. Skips without an
// sm90 GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/fa3_bwd_forced.h"
#include "attention_case.h"
#include "backward_repeat.h"
#include "device_mirror.h"
#include "fa3/bwd_variant_names.h"
#include "fa3/bwd_variants.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

// The calls the FA3 backward covers (fa3::check_bwd): fp16/bf16, q/k and v head dims in one of
// its size classes (<= 64, <= 128, <= 256), no dropout.
bool fa3_bwd_covers(const AttentionCase& c) {
  auto size_class = [](int x) { return x <= 64 ? 1 : x <= 128 ? 2 : 3; };
  return c.dtype != DType::F32 && c.dropout_p == 0.f && c.num_splits <= 1 && size_class(c.head_dim) == size_class(c.dv());
}

std::vector<AttentionCase> fa3_bwd_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : feature_sweep())
    if (fa3_bwd_covers(c)) cases.push_back(c);
  return cases;
}

// Grids with several key blocks (128 keys each) and row blocks per CTA, GQA groups, ragged ends,
// varlen batches with empty sequences and seqused_k (NaN in K and V past it).
std::vector<AttentionCase> fa3_bwd_grid() {
  std::vector<AttentionCase> cases;
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      // (sizes kept small: the float64 reference runs on one CPU core)
      AttentionCase c;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_k = 2;
      c.seqlen_q = 300;
      c.seqlen_k = 400;
      c.head_dim = d;
      c.causal = causal;
      cases.push_back(c);
      c.seqlen_q = 400;
      c.seqlen_k = 300;
      c.heads_k = 4;
      cases.push_back(c);
    }
  AttentionCase window;
  window.batch = 1;
  window.heads_q = 4;
  window.heads_k = 1;
  window.seqlen_q = window.seqlen_k = 600;
  window.head_dim = 128;
  window.window_left = 200;
  window.window_right = 30;
  cases.push_back(window);
  window.head_dim = 64;
  window.window_left = 0;
  window.window_right = 300;
  cases.push_back(window);
  for (int d : {64, 128, 256}) {
    AttentionCase varlen;
    varlen.heads_q = 2;
    varlen.heads_k = 1;
    varlen.head_dim = d;
    varlen.varlen_q = {300, 0, 90, 513, 1};
    varlen.varlen_k = {250, 33, 90, 700, 260};
    varlen.causal = d == 128;
    cases.push_back(varlen);
    AttentionCase used;
    used.batch = 3;
    used.heads_q = used.heads_k = 2;
    used.seqlen_q = 300;
    used.seqlen_k = 500;
    used.head_dim = d;
    used.seqused_k = {500, 130, 0};
    used.causal = d == 64;
    cases.push_back(used);
  }
  AttentionCase f16 = cases[1];
  f16.dtype = DType::F16;
  cases.push_back(f16);
  // Softcap and ALiBi (the general score path) over several key and row blocks.
  for (int d : {64, 128, 256}) {
    AttentionCase general = cases[2];  // causal GQA
    general.head_dim = d;
    general.softcap = 2.f;
    general.alibi = d == 128 ? 2 : 0;
    cases.push_back(general);
    general.softcap = 0.f;
    general.alibi = 1;
    general.causal = false;
    general.window_left = 100;
    cases.push_back(general);
    // A softcap of 30 on logits of tens (scale 2): the recomputed tanh must be the forward's.
    general.softcap = 30.f;
    general.alibi = 0;
    general.window_left = -1;
    general.softmax_scale = 2.f;
    cases.push_back(general);
  }
  return cases;
}

// The "<= 3x the same-precision reference's error" rule for the gradients; `call` replaces the
// public bwd on the device (a forced kernel variant).
void expect_fa3_backward_matches(const AttentionCase& c, bool deterministic, const gpu_test::DeviceBwd& call = {}) {
  AttentionRun run(c);
  const BwdRunner runner = [deterministic, &call](const BwdParams& host) {
    BwdParams p = host;
    p.deterministic = deterministic;
    return call ? gpu_test::bwd_on_device_via(p, call) : gpu_test::bwd_on_device(p);
  };
  const BwdResult r = run.check_bwd(Backend::Fa3, gpu_test::fwd_on_device, runner);
  expect_within(r.dq, 3.0, rounding_floor(c.dtype, r.dq.reference_max), "dq");
  expect_within(r.dk, 3.0, rounding_floor(c.dtype, r.dk.reference_max), "dk");
  expect_within(r.dv, 3.0, rounding_floor(c.dtype, r.dv.reference_max), "dv");
}

class Fa3Backward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa3Backward, MatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_backward_matches(GetParam(), false);
}

TEST_P(Fa3Backward, DeterministicMatchesReference) {
  SKIP_WITHOUT_SM90();
  expect_fa3_backward_matches(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa3Backward, ::testing::ValuesIn(fa3_bwd_sweep()), ParamTestName());
INSTANTIATE_TEST_SUITE_P(Grid, Fa3Backward, ::testing::ValuesIn(fa3_bwd_grid()), ParamTestName());

// Rows that see no key (causal with more queries than keys: the first sq - sk rows) get exactly
// zero dQ, and keys past seqused_k exactly zero dK and dV.
TEST(Fa3BackwardMasked, GradientsOfUnseenRowsAndKeysAreZero) {
  SKIP_WITHOUT_SM90();
  for (int d : {64, 128, 256}) {
    AttentionCase c = two_sequences(300, 100, 4, 2, d);
    c.causal = true;
    c.seqused_k = {100, 60};
    AttentionRun run(c);
    run.check_fwd(Backend::Fa3, gpu_test::fwd_on_device);
    HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
    const Status st = gpu_test::bwd_on_device(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa3));
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> gq = dq.to_float(), gk = dk.to_float(), gv = dv.to_float();
    for (int b = 0; b < c.batch; ++b) {
      const int used = c.seqused_k[size_t(b)];
      for (int row = 0; row < c.seqlen_q; ++row)
        for (int h = 0; h < c.heads_q; ++h)
          for (int x = 0; x < d; ++x) {
            const float g = gq[((size_t(b) * c.seqlen_q + row) * c.heads_q + h) * d + x];
            // Row i sees keys up to i + used - sq (the mask is aligned to the keys in use).
            if (row + used - c.seqlen_q < 0) ASSERT_EQ(g, 0.f) << "d" << d << " b" << b << " row " << row;
            ASSERT_TRUE(std::isfinite(g));
          }
      for (int key = used; key < c.seqlen_k; ++key)
        for (int h = 0; h < c.heads_k; ++h)
          for (int x = 0; x < d; ++x) {
            const size_t i = ((size_t(b) * c.seqlen_k + key) * c.heads_k + h) * d + x;
            ASSERT_EQ(gk[i], 0.f) << "d" << d << " b" << b << " key " << key;
            ASSERT_EQ(gv[i], 0.f) << "d" << d << " b" << b << " key " << key;
          }
    }
  }
}

// Scores of +-1e4 (q and k scaled by 100): one-hot softmax rows; the gradients stay finite and
// within the rule.
TEST(Fa3BackwardExtreme, LargeScoresStayFinite) {
  SKIP_WITHOUT_SM90();
  for (int d : {64, 128, 256}) {
    AttentionCase c = two_sequences(200, 333, 4, 2, d);
    c.causal = d == 128;
    AttentionRun run(c);
    for (HostTensor* t : {&run.q, &run.k}) {
      const std::vector<float> x = t->to_float();
      for (int64_t i = 0; i < t->numel(); ++i) t->set(i, 100.f * x[size_t(i)]);
    }
    const BwdResult r = run.check_bwd(Backend::Fa3, gpu_test::fwd_on_device, gpu_test::bwd_on_device);
    for (const Errors* e : {&r.dq, &r.dk, &r.dv}) ASSERT_TRUE(std::isfinite(e->fast)) << "d" << d;
    expect_within(r.dv, 3.0, rounding_floor(c.dtype, r.dv.reference_max), "dv");
  }
}

TEST(Fa3BackwardDeterminism, FiftyRunsAreBitwiseEqual) {
  SKIP_WITHOUT_SM90();
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      AttentionCase c = two_sequences(700, 900, 8, 2, d);
      c.causal = causal;
      SCOPED_TRACE(c.name());
      expect_backward_runs_bitwise_equal(c, Backend::Fa3, /*deterministic=*/true, 50);
    }
}

TEST(Fa3BackwardRace, HundredRunsAgree) {
  SKIP_WITHOUT_SM90();
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      AttentionCase c = two_sequences(2000, 2100, 8, 4, d);
      c.causal = causal;
      SCOPED_TRACE(c.name());
      expect_backward_runs_agree(c, Backend::Fa3, 100);
    }
}

// Forced kernels (api::bwd_fa3_forced): one not built at the call's head dim is refused.

fa3::BwdKernel kernel_named(const std::string& spec) {
  std::string why;
  const auto kernel = fa3::parse_bwd_kernel(spec, &why);
  if (!kernel) throw std::invalid_argument(why);
  return *kernel;
}

// The backward through api::bwd_fa3_forced with the kernel (on device tensors).
gpu_test::DeviceBwd forced_kernel(const fa3::BwdKernel& kernel) {
  return [kernel](const BwdParams& d) { return api::bwd_fa3_forced(d, {.kernel = kernel}); };
}

// The CTA order in sections (BwdPlan::section_mb) is the deterministic mode's default; forced the
// other way round in both modes, every third sweep case still matches (ragged, varlen, GQA, masks).
TEST(Fa3BackwardSections, EitherOrderMatchesReferenceInBothModes) {
  SKIP_WITHOUT_SM90();
  const std::vector<AttentionCase> sweep = fa3_bwd_sweep();
  for (size_t i = 0; i < sweep.size(); i += 3) {
    SCOPED_TRACE(sweep[i].name());
    for (bool deterministic : {false, true}) {
      const int section_mb = deterministic ? 0 : 40;
      expect_fa3_backward_matches(sweep[i], deterministic, [section_mb](const BwdParams& d) {
        return api::bwd_fa3_forced(d, {.section_mb = section_mb});
      });
    }
  }
}

// Every built kernel that bwd_plan does not pick for a call (bwd_variants.h: the d64 alternate
// dQ and the d256 64-key kernel with plain scores), forced over the sweep and the grid in both modes, then 50-run
// determinism and a 100-run race check: a kernel a plan can name is tested as the plan's are.
bool is_plans_kernel(int head_dim, bool general, const fa3::BwdKernel* k) { return k == fa3::bwd_first_kernel(head_dim, general); }

// The kernels' head dim a case runs at (64, 128 or 256) and whether it takes the general score
// path (softcap or ALiBi): which of bwd_variants.h's kernels can run it.
struct KernelFamily {
  int head_dim;
  bool general;
};
KernelFamily kernel_family(const AttentionCase& c) {
  const int widest = std::max(c.head_dim, c.dv());
  return {widest <= 64 ? 64 : widest <= 128 ? 128 : 256, c.softcap != 0.f || c.alibi != 0};
}

std::vector<std::pair<AttentionCase, fa3::BwdKernel>> fa3_bwd_other_kernel_cases() {
  std::vector<std::pair<AttentionCase, fa3::BwdKernel>> cases;
  std::vector<AttentionCase> all = fa3_bwd_sweep();
  for (const AttentionCase& c : fa3_bwd_grid()) all.push_back(c);
  for (const AttentionCase& c : all) {
    const auto [d, general] = kernel_family(c);
    for (const fa3::BwdKernel& k : fa3::bwd_kernels_of(d))
      if (k.takes(general) && !is_plans_kernel(d, general, &k)) cases.push_back({c, k});
  }
  return cases;
}

TEST(Fa3BackwardOtherKernels, MatchReferenceInBothModes) {
  SKIP_WITHOUT_SM90();
  const auto cases = fa3_bwd_other_kernel_cases();
  for (const auto& [c, kernel] : cases) {
    SCOPED_TRACE(c.name() + " block_m " + std::to_string(kernel.block_m) + " " + fa3::bwd_kernel_name(kernel));
    for (bool deterministic : {false, true}) expect_fa3_backward_matches(c, deterministic, forced_kernel(kernel));
  }
  std::printf("other kernels: %zu cases\n", cases.size());
}

TEST(Fa3BackwardOtherKernels, DeterministicAndRaceFree) {
  SKIP_WITHOUT_SM90();
  for (int d : {64, 128, 256}) {
    const fa3::BwdKernelList kernels = fa3::bwd_kernels_of(d);
    for (const fa3::BwdKernel* k = kernels.begin(); k != kernels.end(); ++k) {
      if (is_plans_kernel(d, false, k)) continue;
      for (bool causal : {false, true}) {
        AttentionCase c = two_sequences(700, 900, 8, 2, d);
        c.causal = causal;
        SCOPED_TRACE(c.name() + " block_m " + std::to_string(k->block_m) + " " + fa3::bwd_kernel_name(*k));
        expect_backward_runs_bitwise_equal(c, Backend::Fa3, /*deterministic=*/true, 50, forced_kernel(*k));
        AttentionCase r = two_sequences(2000, 2100, 8, 4, d);
        r.causal = causal;
        expect_backward_runs_agree(r, Backend::Fa3, 100, forced_kernel(*k));
      }
    }
  }
}

// Staggered row walks (BwdPlan::row_stagger): every built kernel over every other sweep case
// (ragged, varlen, GQA groups, masks) matches the reference with the CTAs' walks starting at other
// row blocks and wrapping round, and a 100-run race check agrees.
TEST(Fa3BackwardRowStagger, StaggeredWalksMatchReference) {
  SKIP_WITHOUT_SM90();
  const std::vector<AttentionCase> sweep = fa3_bwd_sweep();
  size_t runs = 0;
  for (size_t i = 0; i < sweep.size(); i += 2) {
    const AttentionCase& c = sweep[i];
    const auto [d, general] = kernel_family(c);
    for (const fa3::BwdKernel& k : fa3::bwd_kernels_of(d)) {
      if (!k.takes(general)) continue;
      for (int stagger : {4, 16}) {
        SCOPED_TRACE(c.name() + " " + fa3::bwd_kernel_name(k) + " row_stagger " + std::to_string(stagger));
        expect_fa3_backward_matches(c, /*deterministic=*/false, [k, stagger](const BwdParams& dp) {
          return api::bwd_fa3_forced(dp, {.kernel = k, .row_stagger = stagger});
        });
        ++runs;
      }
    }
  }
  for (int d : {64, 128, 256}) {
    for (const fa3::BwdKernel& k : fa3::bwd_kernels_of(d)) {
      AttentionCase r = two_sequences(2000, 2100, 8, 4, d);
      r.causal = d == 128;
      SCOPED_TRACE(r.name() + " " + fa3::bwd_kernel_name(k));
      expect_backward_runs_agree(r, Backend::Fa3, 100, [k](const BwdParams& dp) {
        return api::bwd_fa3_forced(dp, {.kernel = k, .row_stagger = 8});
      });
    }
  }
  std::printf("staggered walks: %zu runs\n", runs);
}

// The status of a backward of `c` through the named kernel (its forward on the FA3 path first).
Status forced_backward_status(const AttentionCase& c, const std::string& spec) {
  AttentionRun run(c);
  run.check_fwd(Backend::Fa3, gpu_test::fwd_on_device);
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  return gpu_test::bwd_on_device_via(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa3),
                                     forced_kernel(kernel_named(spec)));
}

TEST(Fa3BackwardVariantRefusal, UnbuiltVariantIsUnsupported) {
  SKIP_WITHOUT_SM90();
  const Status st = forced_backward_status(two_sequences(100, 130, 2, 2, 128), "dq-alternate");  // d64 only
  EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
  EXPECT_EQ(st.argument(), "plan") << st.message();
  // 128-row steps take plain scores only: with a softcap the d64 call refuses them.
  AttentionCase capped = two_sequences(100, 130, 2, 2, 64);
  capped.softcap = 5.f;
  const Status capped_st = forced_backward_status(capped, "default@128");
  EXPECT_EQ(capped_st.code(), ErrorCode::Unsupported) << capped_st.message();
  EXPECT_NE(capped_st.message().find("softcap or ALiBi"), std::string::npos) << capped_st.message();
}

TEST(Fa3BackwardErrors, UncoveredCallsAreUnsupported) {
  SKIP_WITHOUT_SM90();
  struct Uncovered {
    AttentionCase c;
    const char* argument;
  };
  std::vector<Uncovered> cases;
  AttentionCase dropout;
  dropout.dropout_p = 0.1f;
  cases.push_back({dropout, "dropout_p"});
  AttentionCase mixed;  // q/k and v head dims in different size classes
  mixed.head_dim = 128;
  mixed.head_dim_v = 64;
  cases.push_back({mixed, "q"});
  for (const auto& [c, argument] : cases) {
    AttentionRun run(c);
    run.check_fwd(Backend::Fa2, gpu_test::fwd_on_device);
    HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
    const Status st = gpu_test::bwd_on_device(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa3));
    EXPECT_EQ(st.code(), ErrorCode::Unsupported) << c.name() << ": " << st.message();
    EXPECT_EQ(st.argument(), argument) << c.name() << ": " << st.message();
  }
}

}  // namespace
}  // namespace flashattn::test
