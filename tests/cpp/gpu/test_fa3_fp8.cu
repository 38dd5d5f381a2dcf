// The FA3 fp8 (e4m3) forward against the naive reference on the same fp8 inputs (dequantised by
// their per-(sequence, kv head) descales). The kernels are not switched on yet
// (fa3::kFp8FwdEnabled): these tests force them through fa3::fwd_fp8 with each plan that can run a
// case (fa3::fp8_fwd_plans), and check that the public API still refuses fp8 on the GPU. Skips
// without an sm90 GPU.
//
// Tolerance. The kernels compute S in float32 (products of e4m3 values are exact, the sums float),
// the softmax in float32, and round P to e4m3 for P V: 3 mantissa bits, a relative error of at most
// 2^-4 for normal values. P is shifted so that the row's largest weight so far is 2^8, so weights
// below e4m3's normal range (2^-6) are below 2^-14 of it and off by at most 2^-10 each. The row sum
// comes from the unrounded weights, and the final row sum is at least 2^8. So each output element
// is off from the exact attention of the dequantised inputs by at most
//   2^-4 max|v| + sk 2^-18 max|v|  (P's roundings)  +  one unit of out's dtype at max|v|  (its store),
// which each case must meet (fp8_error_bound). Each case must also meet the project's rule,
// error <= 2 x the error of the reference computing in the inputs' precision + a rounding floor,
// where that reference rounds S to bfloat16 and the normalised P to e4m3 (coarser than the kernels'
// shifted P, whose small weights stay normal): a layout mistake that moves weights between keys
// within that bound still fails the rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "api/validate.h"
#include "attention_case.h"
#include "device_mirror.h"
#include "fa3/fa3_backend.h"
#include "fa3/fp8_fwd_plan.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

std::string plan_name(const fa3::Fp8FwdPlan* plan) {
  if (plan == nullptr) return "plan fp8_fwd_plan";
  return "plan d" + std::to_string(plan->head_dim) + " " + std::to_string(plan->block_m) + "x" + std::to_string(plan->block_n) +
         (plan->general_score ? " general" : "") + (plan->pingpong ? " pingpong" : "") + (plan->no_key_limits ? " unmasked-calls" : "") + (plan->tma_store_o ? " tma-store" : "") +
         (plan->dynamic_schedule ? "" : " cta-per-tile") +
         " section " + std::to_string(plan->section_mb);
}

// Runs fa3::fwd_fp8 on the device copies of a host call, with `plan` forced (null: the plan
// function's choice). The call is validated as the API does first.
FwdRunner forced_fp8(const fa3::Fp8FwdPlan* plan) {
  return [plan](const FwdParams& host) {
    return gpu_test::fwd_on_device_via(host, [plan](const FwdParams& d) {
      AttnProblem problem;
      if (Status st = api::make_fwd_problem(d, &problem); !st.ok()) return st;
      if (d.out.numel() == 0) return Status();  // as the API: no query rows, nothing to write
      return fa3::fwd_fp8(problem, d.stream, plan);
    });
  };
}

// The call's problem as built on the host (for the plan functions: shapes and options only).
AttnProblem host_problem(const AttentionRun& run, const AttentionCase& c) {
  std::vector<int64_t> out_shape = run.q.shape();
  out_shape.back() = c.dv();
  HostTensor out(c.out_dtype(), out_shape);
  AttnProblem problem;
  const Status st = api::make_fwd_problem(run.fwd_params(out.view(), {}, Backend::Cpu), &problem);
  EXPECT_TRUE(st.ok()) << st.message();
  return problem;
}

// max |v| dequantised (finite values: keys past seqused_k hold NaN).
double max_abs_v(const AttentionRun& run) {
  double descale = 0;
  for (float x : run.v_descale.to_float()) descale = std::max(descale, double(std::fabs(x)));
  return max_abs(run.v.to_float()) * (run.v_descale.numel() > 0 ? descale : 1.0);
}

// The bound derived at the top of this file.
double fp8_error_bound(const AttentionRun& run, const AttentionCase& c) {
  const int sk = c.varlen() ? *std::max_element(c.varlen_k.begin(), c.varlen_k.end()) : c.seqlen_k;
  const double v = max_abs_v(run);
  const double unit = c.out_dtype() == DType::F16 ? 0x1p-11 : 0x1p-8;
  return (0x1p-4 + double(sk) * 0x1p-18) * v + unit * std::max(1.0, v);
}

void expect_fp8_matches(AttentionRun& run, const AttentionCase& c, const fa3::Fp8FwdPlan* plan) {
  SCOPED_TRACE(plan_name(plan));
  const FwdResult f = run.check_fwd(Backend::Fa3, forced_fp8(plan));
  expect_within(f.out, 2.0, rounding_floor(c.out_dtype(), f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
  EXPECT_LE(f.out.fast, fp8_error_bound(run, c)) << "out: beyond the e4m3 bound (max |v| " << max_abs_v(run) << ")";
}

// Whether the fp8 kernels cover the case's head dims: q/k and v in one class (<= 64, <= 128, <= 256).
bool fp8_head_dims(int d, int dv) {
  auto size_class = [](int x) { return x <= 64 ? 0 : x <= 128 ? 1 : 2; };
  return size_class(d) == size_class(dv);
}

std::vector<AttentionCase> fa3_fp8_sweep() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : fp8_sweep())
    if (c.num_splits <= 1 && fp8_head_dims(c.head_dim, c.dv())) cases.push_back(c);
  // float16 out, and a head dim below its class (the TMA zero-fills the columns past it).
  AttentionCase f16 = fp8_sweep().front();
  f16.fp8_out = DType::F16;
  f16.causal = true;
  cases.push_back(f16);
  AttentionCase narrow = fp8_sweep().front();
  narrow.head_dim = 96;
  narrow.seqlen_k = 300;
  cases.push_back(narrow);
  AttentionCase d192 = narrow;
  d192.head_dim = 192;
  d192.seqused_k = {250, 17};
  cases.push_back(d192);
  return cases;
}

class Fa3Fp8Forward : public ::testing::TestWithParam<AttentionCase> {};

// Every plan that can run the case, and the plan function's own choice.
TEST_P(Fa3Fp8Forward, EveryPlanMatchesReference) {
  SKIP_WITHOUT_SM90();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  const std::vector<fa3::Fp8FwdPlan> plans = fa3::fp8_fwd_plans(host_problem(run, c));
  ASSERT_FALSE(plans.empty());
  for (const fa3::Fp8FwdPlan& plan : plans) expect_fp8_matches(run, c, &plan);
  expect_fp8_matches(run, c, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa3Fp8Forward, ::testing::ValuesIn(fa3_fp8_sweep()), ParamTestName());

// Until the kernels are switched on, the public API refuses fp8 on the GPU by name, before any
// kernel runs (out stays poisoned); switched on, it runs them (Auto and Fa3 alike) and refuses FA2.
TEST(Fa3Fp8Forward, PublicApiRefusesUntilEnabled) {
  SKIP_WITHOUT_SM90();
  const AttentionCase c = fp8_sweep().front();
  for (Backend backend : {Backend::Fa3, Backend::Auto}) {
    AttentionRun run(c);
    if (!fa3::kFp8FwdEnabled) {
      std::vector<int64_t> out_shape = run.q.shape();
      HostTensor out(c.out_dtype(), out_shape);
      const Status st = gpu_test::fwd_on_device(run.fwd_params(out.view(), {}, backend));
      EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
      EXPECT_EQ(st.argument(), "q") << st.message();
      EXPECT_NE(st.message().find("not yet validated on a GPU"), std::string::npos) << st.message();
    } else {
      const FwdResult f = run.check_fwd(backend, gpu_test::fwd_on_device);
      expect_within(f.out, 2.0, rounding_floor(c.out_dtype(), f.out.reference_max), "out");
      expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
    }
  }
  if (fa3::kFp8FwdEnabled) {  // FA2 forced: no fp8 kernels, said by name
    AttentionRun run(c);
    HostTensor out(c.out_dtype(), run.q.shape());
    const Status st = gpu_test::fwd_on_device(run.fwd_params(out.view(), {}, Backend::Fa2));
    EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
    EXPECT_EQ(st.argument(), "q") << st.message();
    EXPECT_NE(st.message().find("FA2 has no fp8 kernels"), std::string::npos) << st.message();
  }
}

// A call the fp8 kernels do not cover is refused by name; so is a plan that does not fit the call.
TEST(Fa3Fp8Forward, RefusesWhatItDoesNotCover) {
  SKIP_WITHOUT_SM90();
  auto run_with = [](const AttentionCase& c, const fa3::Fp8FwdPlan* plan) {
    AttentionRun run(c);
    std::vector<int64_t> out_shape = run.q.shape();
    out_shape.back() = c.dv();
    HostTensor out(c.out_dtype(), out_shape);
    return forced_fp8(plan)(run.fwd_params(out.view(), {}, Backend::Fa3));
  };
  AttentionCase mixed = fp8_sweep().front();
  mixed.head_dim = 192;
  mixed.head_dim_v = 128;  // q/k and v in different classes
  const Status mixed_st = run_with(mixed, nullptr);
  EXPECT_EQ(mixed_st.code(), ErrorCode::Unsupported) << mixed_st.message();
  EXPECT_EQ(mixed_st.argument(), "q") << mixed_st.message();

  AttentionCase causal = fp8_sweep().front();
  causal.head_dim = 128;
  causal.causal = true;
  const fa3::Fp8FwdPlan missing{128, 128, 112, false, true};  // no such kernel
  AttentionCase d64 = causal;
  d64.head_dim = 64;
  fa3::Fp8FwdPlan unmasked{64, 192, 160, false, false};  // the kernel for calls without causal or window limits
  unmasked.no_key_limits = true;
  const std::pair<const AttentionCase*, const fa3::Fp8FwdPlan*> refused[] = {{&causal, &missing}, {&d64, &unmasked}};
  for (const auto& [call, plan] : refused) {
    const Status st = run_with(*call, plan);
    EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
    EXPECT_EQ(st.argument(), "plan") << st.message();
  }
  fa3::Fp8FwdPlan general{128, 128, 128, true, false};  // the call has plain scores
  EXPECT_EQ(run_with(causal, &general).argument(), "plan");
}

// Longer sequences over several key tiles (ring wrap, ragged last tiles around the tile widths),
// GQA, causal and not, at each head dim, with each plan.
std::vector<AttentionCase> long_cases() {
  std::vector<AttentionCase> cases;
  for (int d : {64, 128, 256})
    for (auto [sq, sk, causal] : {std::tuple{700, 1025, false}, std::tuple{513, 1500, true}, std::tuple{1000, 897, true}}) {
      AttentionCase c = fp8_case(1, 4, 2, d, sq, sk);
      c.causal = causal;
      c.seed = uint64_t(cases.size()) + 501;
      cases.push_back(c);
    }
  AttentionCase window = cases[1];
  window.causal = false;
  window.window_left = 300;
  window.window_right = 40;
  cases.push_back(window);
  AttentionCase varlen;
  varlen.dtype = DType::F8E4M3;
  varlen.heads_q = 8;
  varlen.heads_k = 2;
  varlen.head_dim = 128;
  varlen.varlen_q = {600, 0, 90, 513};
  varlen.varlen_k = {650, 33, 1100, 513};
  varlen.seqused_k = {640, 0, 1031, 300};
  varlen.seed = 601;
  cases.push_back(varlen);
  AttentionCase softcap = cases[3];
  softcap.softcap = 3.f;
  cases.push_back(softcap);
  return cases;
}

class Fa3Fp8ForwardLong : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa3Fp8ForwardLong, EveryPlanMatchesReference) {
  SKIP_WITHOUT_SM90();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  for (const fa3::Fp8FwdPlan& plan : fa3::fp8_fwd_plans(host_problem(run, c))) expect_fp8_matches(run, c, &plan);
}

INSTANTIATE_TEST_SUITE_P(Grid, Fa3Fp8ForwardLong, ::testing::ValuesIn(long_cases()), ParamTestName());

// More work tiles than SMs: persistent CTAs over several tiles each (static order for dense
// unmasked calls, the tile counter for causal ones), a CTA per tile, sections, O by TMA stores and
// by register stores.
std::vector<AttentionCase> persistent_cases() {
  std::vector<AttentionCase> cases;
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      AttentionCase c = fp8_case(3, 24, 6, d, 300, 700);
      c.causal = causal;
      c.seed = uint64_t(cases.size()) + 701;
      cases.push_back(c);
    }
  return cases;
}

class Fa3Fp8ForwardPersistent : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fa3Fp8ForwardPersistent, SchedulesMatchReference) {
  SKIP_WITHOUT_SM90();
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  for (fa3::Fp8FwdPlan plan : fa3::fp8_fwd_plans(host_problem(run, c))) {
    for (auto [dynamic, section_mb] : {std::pair{true, 16}, std::pair{true, 1}, std::pair{false, 0}}) {
      plan.dynamic_schedule = dynamic;
      plan.section_mb = section_mb;
      expect_fp8_matches(run, c, &plan);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, Fa3Fp8ForwardPersistent, ::testing::ValuesIn(persistent_cases()), ParamTestName());

// Extreme inputs, at each head dim: every element at e4m3's largest magnitude (+-448) with large and small
// descales, a large softmax scale (a few keys take all the weight), and all-equal scores (uniform
// weights over many keys): finite outputs, within the rule and the bound.
TEST(Fa3Fp8ForwardExtremes, FiniteAndWithinTolerance) {
  SKIP_WITHOUT_SM90();
  for (int variant = 0; variant < 12; ++variant) {
    AttentionCase c = fp8_case(2, 4, 2, 64 << (variant / 4), 200, 1100);
    c.causal = variant % 2 == 1;
    c.seed = uint64_t(801 + variant);
    if (variant % 4 == 2) c.softmax_scale = 40.f;
    AttentionRun run(c);
    std::mt19937_64 rng(c.seed);
    for (HostTensor* t : {&run.q, &run.k, &run.v})
      for (int64_t i = 0; i < t->numel(); ++i) {
        const bool negative = variant % 4 == 3 ? false : (rng() & 1) != 0;  // variant 3: all scores equal
        t->set(i, negative ? -448.f : 448.f);
      }
    const float q_scale = variant % 4 == 0 ? 4.f : 1e-3f;
    for (int64_t i = 0; i < run.q_descale.numel(); ++i) {
      run.q_descale.set(i, q_scale * (1.f + 0.1f * float(i)));
      run.k_descale.set(i, 1.f / (1.f + float(i)));
      run.v_descale.set(i, variant % 4 == 0 ? 8.f : 1e-2f);
    }
    SCOPED_TRACE("variant " + std::to_string(variant) + ": " + c.name());
    for (const fa3::Fp8FwdPlan& plan : fa3::fp8_fwd_plans(host_problem(run, c))) {
      expect_fp8_matches(run, c, &plan);
      for (float x : run.out.to_float()) ASSERT_TRUE(std::isfinite(x)) << plan_name(&plan);
      for (float x : run.lse.to_float()) ASSERT_TRUE(std::isfinite(x)) << plan_name(&plan);
    }
  }
}

// A race shows as results that move between runs: each plan of a persistent dense and a causal
// case runs repeatedly on the same device inputs, outputs poisoned before each run.
TEST(Fa3Fp8ForwardRace, RepeatedRunsAreBitwiseEqual) {
  SKIP_WITHOUT_SM90();
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      AttentionCase c = fp8_case(2, 16, 4, d, 1000, 2300);
      c.causal = causal;
      AttentionRun run(c);
      HostTensor out(c.out_dtype(), {c.batch, c.seqlen_q, c.heads_q, c.dv()}), lse(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
      gpu_test::DeviceMirror m;
      FwdParams d_params = run.fwd_params(out.view(), lse.view(), Backend::Fa3);
      d_params.q = m.upload(d_params.q);
      d_params.k = m.upload(d_params.k);
      d_params.v = m.upload(d_params.v);
      d_params.q_descale = m.upload(d_params.q_descale);
      d_params.k_descale = m.upload(d_params.k_descale);
      d_params.v_descale = m.upload(d_params.v_descale);
      d_params.out = m.output(d_params.out);
      d_params.softmax_lse = m.output(d_params.softmax_lse);
      AttnProblem problem;
      ASSERT_TRUE(api::make_fwd_problem(d_params, &problem).ok());
      const size_t out_bytes = size_t(out.numel()) * 2, lse_bytes = size_t(lse.numel()) * 4;
      for (const fa3::Fp8FwdPlan& plan : fa3::fp8_fwd_plans(host_problem(run, c))) {
        SCOPED_TRACE(c.name() + ", " + plan_name(&plan));
        std::vector<uint8_t> first_out, first_lse;
        for (int rep = 0; rep < 30; ++rep) {
          CUDA_CHECK(cudaMemset(d_params.out.data, 0xff, out_bytes));
          CUDA_CHECK(cudaMemset(d_params.softmax_lse.data, 0xff, lse_bytes));
          const Status st = fa3::fwd_fp8(problem, nullptr, &plan);
          ASSERT_TRUE(st.ok()) << st.message();
          m.download();
          const auto* o = static_cast<const uint8_t*>(out.data());
          const auto* l = static_cast<const uint8_t*>(lse.data());
          std::vector<uint8_t> ov(o, o + out_bytes), lv(l, l + lse_bytes);
          if (rep == 0) {
            first_out = ov;
            first_lse = lv;
            continue;
          }
          ASSERT_EQ(first_out, ov) << "run " << rep;
          ASSERT_EQ(first_lse, lv) << "run " << rep;
        }
      }
    }
}

}  // namespace
}  // namespace flashattn::test

namespace flashattn::test {
namespace {

// Plain-score kernels take the raw scores' row max, right only for a scale >= 0: a negative
// descale product must give NaN in that (sequence, kv head)'s rows, never a wrong number; the
// other heads are unaffected. The general-score plans scale first: their results stay finite.
TEST(Fa3Fp8ForwardNegativeDescale, PlainPlansWriteNanGeneralPlansStayFinite) {
  SKIP_WITHOUT_SM90();
  const AttentionCase c = fp8_case(2, 4, 2, 128, 100, 300);
  AttentionRun run(c);
  for (int64_t i = 0; i < run.q_descale.numel(); ++i) run.q_descale.set(i, i == 1 ? -0.5f : 0.5f);  // (b 0, kv head 1)
  std::vector<fa3::Fp8FwdPlan> plans = fa3::fp8_fwd_plans(host_problem(run, c));
  fa3::Fp8FwdPlan general{128, 128, 128, true, false};
  plans.push_back(general);
  for (const fa3::Fp8FwdPlan& plan : plans) {
    SCOPED_TRACE(plan_name(&plan));
    HostTensor out(c.out_dtype(), {c.batch, c.seqlen_q, c.heads_q, c.dv()});
    FwdParams params = run.fwd_params(out.view(), {}, Backend::Fa3);
    if (plan.general_score) params.softcap = 1e4f;  // general scores; the softcap barely moves them
    ASSERT_TRUE(forced_fp8(&plan)(params).ok());
    const std::vector<float> o = out.to_float();
    for (int b = 0; b < c.batch; ++b)
      for (int r = 0; r < c.seqlen_q; ++r)
        for (int h = 0; h < c.heads_q; ++h) {
          const bool negative = b == 0 && h / 2 == 1;
          for (int d = 0; d < c.dv(); ++d) {
            const float x = o[((size_t(b) * c.seqlen_q + r) * c.heads_q + h) * c.dv() + d];
            if (negative && !plan.general_score) ASSERT_TRUE(std::isnan(x)) << b << " " << r << " " << h;
            else ASSERT_TRUE(std::isfinite(x)) << b << " " << r << " " << h;
          }
        }
  }
}

}  // namespace
}  // namespace flashattn::test
