// fp8 (float8_e4m3fn) forward on the CPU backend, the oracle of the fp8 kernels: attention over
// the dequantised inputs with P unrounded. Checked two ways: against the naive reference (which
// dequantises by the same problem fields), and against a float32 call on inputs this file
// dequantises itself, which checks the descale semantics (q's factor per kv head of its group,
// (batch, heads_k) indexing, absent = 1) independently of the library's own indexing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_case.h"
#include "kvcache_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

class Fp8VsReference : public ::testing::TestWithParam<AttentionCase> {};

// The CPU path rounds nothing but the bfloat16 output (float accumulation aside), so it sits within
// one output rounding of the float64 reference; the reference that rounds P to fp8 (the kernels'
// arithmetic) is far looser.
TEST_P(Fp8VsReference, WithinOutputRounding) {
  const AttentionCase& c = GetParam();
  AttentionRun run(c);
  const FwdResult f = run.check_fwd(Backend::Cpu);
  expect_within(f.out, 0.0, 1.25 * rounding_floor(c.out_dtype(), f.out.reference_max), "out");
  expect_within(f.lse, 0.0, 8 * rounding_floor(DType::F32, f.lse.reference_max), "lse");
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fp8VsReference, ::testing::ValuesIn(fp8_sweep()), ParamTestName());

// Sequence of each row of a (batch, seq, heads, d) or varlen (total, heads, d) tensor.
std::vector<int> row_sequences(const AttentionCase& c, const HostTensor& x, const HostTensor& cu) {
  const int64_t rows = c.varlen() ? x.shape()[0] : x.shape()[0] * x.shape()[1];
  std::vector<int> seq(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    if (!c.varlen()) {
      seq[size_t(r)] = int(r / x.shape()[1]);
      continue;
    }
    const auto* starts = static_cast<const int32_t*>(cu.data());
    int b = 0;
    while (starts[b + 1] <= r && b + 1 < int(cu.numel()) - 1) ++b;
    seq[size_t(r)] = b;
  }
  return seq;
}

// x (fp8) times its factor as float32, written here from the semantics alone: row r of sequence b,
// head h reads descale[b][h / group] (group = 1 for k and v; heads_q / heads_k for q).
HostTensor dequantised(const AttentionCase& c, const HostTensor& x, const HostTensor& descale, int group,
                       const HostTensor& cu) {
  HostTensor out(DType::F32, x.shape());
  const int64_t heads = x.shape()[x.shape().size() - 2], dim = x.shape().back();
  const std::vector<int> seq = row_sequences(c, x, cu);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t row = i / (heads * dim), h = (i / dim) % heads;
    const float factor = !descale.shape().empty() ? descale.get(seq[size_t(row)] * c.heads_k + h / group) : 1.f;
    out.set(i, x.get(i) * factor);
  }
  return out;
}

// The fp8 call against a float32 call on the inputs dequantised above; `descales` = false clears
// them from the fp8 call (and the float32 inputs are then the plain e4m3 values).
void expect_matches_dequantised_f32(AttentionCase c, bool descales) {
  SCOPED_TRACE(c.name());
  AttentionRun fp8_run(c);
  if (!descales) fp8_run.q_descale = fp8_run.k_descale = fp8_run.v_descale = HostTensor();
  std::vector<int64_t> out_shape = fp8_run.q.shape();
  out_shape.back() = c.dv();
  const std::vector<int64_t> lse_shape = c.varlen() ? std::vector<int64_t>{c.heads_q, fp8_run.q.shape()[0]}
                                                    : std::vector<int64_t>{c.batch, c.heads_q, c.seqlen_q};
  HostTensor out8(DType::BF16, out_shape), lse8(DType::F32, lse_shape);
  const Status st8 = fwd(fp8_run.fwd_params(out8.view(), lse8.view(), Backend::Cpu));
  ASSERT_TRUE(st8.ok()) << st8.message();

  AttentionCase c32 = c;
  c32.dtype = DType::F32;
  AttentionRun f32_run(c32);
  const int group = c.heads_q / c.heads_k;
  f32_run.q = dequantised(c, fp8_run.q, fp8_run.q_descale, group, fp8_run.cu_q);
  f32_run.k = dequantised(c, fp8_run.k, fp8_run.k_descale, 1, fp8_run.cu_k);
  f32_run.v = dequantised(c, fp8_run.v, fp8_run.v_descale, 1, fp8_run.cu_k);
  HostTensor out32(DType::F32, out_shape), lse32(DType::F32, lse_shape);
  const Status st32 = fwd(f32_run.fwd_params(out32.view(), lse32.view(), Backend::Cpu));
  ASSERT_TRUE(st32.ok()) << st32.message();

  // Per element: the bfloat16 rounding of the float32 result (half a unit in the last place, 2^-9
  // relative) plus float arithmetic.
  const std::vector<float> o8 = out8.to_float(), o32 = out32.to_float();
  for (size_t i = 0; i < o8.size(); ++i)
    ASSERT_NEAR(o8[i], o32[i], std::ldexp(std::fabs(o32[i]), -8) + 1e-6) << "out element " << i;
  const std::vector<float> l8 = lse8.to_float(), l32 = lse32.to_float();
  for (size_t i = 0; i < l8.size(); ++i) {
    if (std::isinf(l32[i])) {
      ASSERT_EQ(l8[i], l32[i]) << "lse element " << i;
      continue;
    }
    ASSERT_NEAR(l8[i], l32[i], 1e-5 * std::max(1.f, std::fabs(l32[i]))) << "lse element " << i;
  }
}

AttentionCase small_fp8_case() { return fp8_case(3, 6, 2, 64, 70, 130); }

TEST(Fp8Semantics, DescalesArePerSequenceAndKvHeadWithQByItsGroup) {
  expect_matches_dequantised_f32(small_fp8_case(), /*descales=*/true);
}

TEST(Fp8Semantics, AbsentDescalesAreOne) { expect_matches_dequantised_f32(small_fp8_case(), /*descales=*/false); }

TEST(Fp8Semantics, AcrossFeatures) {
  AttentionCase c = small_fp8_case();
  c.causal = true;
  c.softcap = 2.f;
  c.num_splits = 3;
  expect_matches_dequantised_f32(c, true);
  c = small_fp8_case();
  c.varlen_q = {30, 0, 77, 5};
  c.varlen_k = {50, 12, 77, 90};
  c.seqused_k = {40, 12, 0, 90};
  c.window_left = 16;
  expect_matches_dequantised_f32(c, true);
  c = small_fp8_case();
  c.seqlen_q = 1;  // decoding: pack-GQA puts a kv head's query heads in one tile
  c.seqlen_k = 500;
  c.num_splits = 0;
  expect_matches_dequantised_f32(c, true);
}

// A per-tensor factor: one float broadcast over (batch, heads_k) with strides 0.
TEST(Fp8Semantics, BroadcastDescale) {
  const AttentionCase c = small_fp8_case();
  AttentionRun run(c);
  HostTensor one(DType::F32, {1});
  one.set(0, 0.375f);
  HostTensor out_broadcast(DType::BF16, {c.batch, c.seqlen_q, c.heads_q, c.dv()});
  HostTensor out_full(DType::BF16, out_broadcast.shape());
  FwdParams p = run.fwd_params(out_broadcast.view(), {}, Backend::Cpu);
  p.q_descale = TensorView::strided(one.data(), DType::F32, {c.batch, c.heads_k}, {0, 0});
  ASSERT_TRUE(fwd(p).ok());
  HostTensor full(DType::F32, {c.batch, c.heads_k});
  for (int64_t i = 0; i < full.numel(); ++i) full.set(i, 0.375f);
  p.out = out_full.view();
  p.q_descale = full.view();
  ASSERT_TRUE(fwd(p).ok());
  EXPECT_EQ(max_abs_diff(out_broadcast.to_float(), out_full.to_float()), 0.0);
}

// fp16 out works like bf16 out.
TEST(Fp8Semantics, Float16Out) {
  const AttentionCase c = small_fp8_case();
  AttentionRun run(c);
  HostTensor out16(DType::F16, {c.batch, c.seqlen_q, c.heads_q, c.dv()}), out_bf(DType::BF16, out16.shape());
  ASSERT_TRUE(fwd(run.fwd_params(out16.view(), {}, Backend::Cpu)).ok());
  ASSERT_TRUE(fwd(run.fwd_params(out_bf.view(), {}, Backend::Cpu)).ok());
  const std::vector<float> a = out16.to_float(), b = out_bf.to_float();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], std::ldexp(std::fabs(a[i]), -8) + 1e-6);
}

// fwd_kvcache over an fp8 cache, with appended fp8 keys, paged or not.
class Fp8KvCache : public ::testing::TestWithParam<KvCase> {};

TEST_P(Fp8KvCache, MatchesReference) { check_kvcache_case(GetParam(), Backend::Cpu); }

std::vector<KvCase> fp8_kv_cases() {
  std::vector<KvCase> cases;
  auto add = [&](auto f) {
    KvCase c;
    c.dtype = DType::F8E4M3;
    c.capacity = 200;
    f(c);
    c.seed = cases.size() + 51;
    cases.push_back(c);
  };
  add([](KvCase&) {});
  add([](KvCase& c) { c.seqlen_new = 3; c.seqlen_q = 3; c.causal = true; });
  add([](KvCase& c) { c.page_size = 16; c.seqlen_new = 2; c.num_splits = 3; });
  add([](KvCase& c) { c.batch_idx = true; c.seqlen_new = 1; c.softcap = 3.f; c.heads_k = 8; });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fp8KvCache, ::testing::ValuesIn(fp8_kv_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test
