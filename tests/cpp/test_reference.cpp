// The naive reference is the oracle of every other test, so it is checked from first principles:
// its backward against central differences of its forward (in double, feature by feature), its
// forward on cases with answers known by hand, its storage addressing against dense runs, and
// the shared scalar pieces it relies on (Philox, fp16/bf16/fp8 conversions) exhaustively.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/numeric.h"
#include "common/philox.h"
#include "common/problem.h"
#include "cpu/reference.h"
#include "cpu/reference_core.h"
#include "test_util.h"

namespace flashattn {
namespace {

using cpu::reference::HeadForward;
using cpu::reference::HeadGradients;
using cpu::reference::HeadProblem;
using cpu::reference::Precision;
using test::HostTensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The elements of t as floats.
std::vector<float> values_of(const HostTensor& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) values[size_t(i)] = t.get(i);
  return values;
}

// Copies the elements of src into dst (same dtype and size). HostTensor's own copy is not used:
// its data() is realigned inside a fresh buffer, so a copied tensor can start at another offset.
void copy_values(const HostTensor& src, HostTensor& dst) {
  ASSERT_EQ(src.dtype(), dst.dtype());
  ASSERT_EQ(src.numel(), dst.numel());
  std::memcpy(dst.data(), src.data(), size_t(src.numel()) * dtype_size(src.dtype()));
}

std::vector<double> normal_values(std::mt19937_64& rng, int64_t n, double stddev = 1.0) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> values(static_cast<size_t>(n));
  for (double& x : values) x = dist(rng);
  return values;
}

// ---------------------------------------------------------------------------------------------
// Finite differences on the double core
// ---------------------------------------------------------------------------------------------

struct Features {
  bool causal = false;
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  float alibi_slope = 0.f;
  float dropout_p = 0.f;
};

// One head with owned inputs; the problem's pointers are refreshed by problem().
struct HeadCase {
  int64_t sq, sk, d, dv;
  std::vector<double> q, k, v, dout;
  std::vector<uint8_t> keep;
  Features features;
  float scale;

  HeadCase(int64_t sq_, int64_t sk_, int64_t d_, int64_t dv_, Features f, std::mt19937_64& rng)
      : sq(sq_), sk(sk_), d(d_), dv(dv_), features(f), scale(float(1.0 / std::sqrt(double(d_)))) {
    // Inputs of size ~1.5 make the logits O(1), so softcap's tanh and the softmax are nonlinear.
    q = normal_values(rng, sq * d, 1.5);
    k = normal_values(rng, sk * d, 1.5);
    v = normal_values(rng, sk * dv);
    dout = normal_values(rng, sq * dv);
    std::bernoulli_distribution kept(1.0 - std::max(0.0, double(f.dropout_p)));
    keep.resize(size_t(sq * sk));
    for (auto& x : keep) x = kept(rng) ? 1 : 0;
  }

  HeadProblem problem() const {
    HeadProblem p;
    p.seqlen_q = sq;
    p.seqlen_k = sk;
    p.head_dim = d;
    p.head_dim_v = dv;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.score.scale = scale;
    p.score.softcap = features.softcap;
    if (features.causal) p.mask.window_right = 0;
    if (features.window_left >= 0) p.mask.window_left = features.window_left;
    if (features.window_right >= 0) p.mask.window_right = features.window_right;
    p.alibi_slope = features.alibi_slope;
    p.dropout_p = features.dropout_p;
    p.keep = keep.data();
    return p;
  }

  // The scalar the backward differentiates: sum(dout * out).
  double loss() const {
    const HeadForward f = cpu::reference::head_forward(problem());
    double sum = 0;
    for (size_t i = 0; i < f.out.size(); ++i) sum += dout[i] * f.out[i];
    return sum;
  }
};

// Largest |analytic - central difference| relative to the largest |analytic| (or 1 when the
// gradient is ~0 everywhere, e.g. fully masked rows).
double fd_relative_error(std::vector<double>& param, const std::vector<double>& analytic,
                         const std::function<double()>& loss) {
  constexpr double kStep = 1e-5;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < param.size(); ++i) {
    const double saved = param[i];
    param[i] = saved + kStep;
    const double up = loss();
    param[i] = saved - kStep;
    const double down = loss();
    param[i] = saved;
    const double numeric = (up - down) / (2 * kStep);
    worst = std::max(worst, std::fabs(numeric - analytic[i]));
    scale = std::max(scale, std::fabs(analytic[i]));
  }
  return worst / std::max(scale, 1e-3);
}

void expect_gradients_match_fd(HeadCase& c) {
  const HeadGradients g = cpu::reference::head_backward(c.problem(), c.dout.data());
  const auto loss = [&] { return c.loss(); };
  constexpr double kTolerance = 1e-7;
  EXPECT_LT(fd_relative_error(c.q, g.dq, loss), kTolerance) << "dq";
  EXPECT_LT(fd_relative_error(c.k, g.dk, loss), kTolerance) << "dk";
  EXPECT_LT(fd_relative_error(c.v, g.dv, loss), kTolerance) << "dv";
}

struct FdCase {
  const char* name;
  Features features;
};

class ReferenceFiniteDifference : public ::testing::TestWithParam<FdCase> {};

TEST_P(ReferenceFiniteDifference, BackwardMatchesCentralDifferences) {
  const Features f = GetParam().features;
  std::mt19937_64 rng(1234);
  for (int64_t sq : {1, 3, 5}) {
    for (int64_t sk : {1, 3, 5}) {
      for (auto [d, dv] : {std::pair<int64_t, int64_t>{8, 8}, {16, 12}}) {
        SCOPED_TRACE(::testing::Message() << "sq=" << sq << " sk=" << sk << " d=" << d << " dv=" << dv);
        HeadCase c(sq, sk, d, dv, f, rng);
        expect_gradients_match_fd(c);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Features, ReferenceFiniteDifference,
    ::testing::Values(FdCase{"plain", {}},
                      FdCase{"causal", {.causal = true}},
                      FdCase{"window_1_1", {.window_left = 1, .window_right = 1}},
                      FdCase{"window_0_2", {.window_left = 0, .window_right = 2}},
                      FdCase{"window_left_only", {.window_left = 1}},
                      FdCase{"softcap", {.softcap = 1.5f}},
                      FdCase{"alibi", {.alibi_slope = 0.37f}},
                      FdCase{"causal_alibi", {.causal = true, .alibi_slope = 0.5f}},
                      FdCase{"dropout", {.dropout_p = 0.3f}},
                      FdCase{"everything",
                             {.causal = true, .window_left = 2, .softcap = 2.f, .alibi_slope = 0.25f,
                              .dropout_p = 0.2f}}),
    [](const ::testing::TestParamInfo<FdCase>& info) { return std::string(info.param.name); });

// GQA: query heads sharing one K/V; the gradient of the summed loss w.r.t. K and V is the sum of
// the per-head gradients, which is what reference::bwd accumulates.
TEST(ReferenceGqaFiniteDifference, SharedKvGradientsSumOverQueryHeads) {
  std::mt19937_64 rng(99);
  HeadCase h0(3, 5, 8, 8, Features{.causal = true, .softcap = 2.f}, rng);
  HeadCase h1(3, 5, 8, 8, Features{.causal = true, .softcap = 2.f}, rng);
  h1.k = h0.k;  // h1 shares h0's K and V; h0 owns the copy we perturb
  h1.v = h0.v;
  const auto total_loss = [&] {
    h1.k = h0.k;
    h1.v = h0.v;
    return h0.loss() + h1.loss();
  };
  const HeadGradients g0 = cpu::reference::head_backward(h0.problem(), h0.dout.data());
  const HeadGradients g1 = cpu::reference::head_backward(h1.problem(), h1.dout.data());
  std::vector<double> dk(g0.dk), dv(g0.dv);
  for (size_t i = 0; i < dk.size(); ++i) dk[i] += g1.dk[i];
  for (size_t i = 0; i < dv.size(); ++i) dv[i] += g1.dv[i];
  EXPECT_LT(fd_relative_error(h0.k, dk, total_loss), 1e-7);
  EXPECT_LT(fd_relative_error(h0.v, dv, total_loss), 1e-7);
}

// ---------------------------------------------------------------------------------------------
// Whole problems built by hand (dense (batch, seq, heads, dim) tensors)
// ---------------------------------------------------------------------------------------------

RowsView dense_rows(const HostTensor& t) {  // (batch, seq, heads, dim)
  const auto& s = t.shape();
  RowsView rows;
  rows.data = const_cast<void*>(t.data());
  rows.head_stride = s[3];
  rows.row_stride = s[2] * s[3];
  rows.batch_stride = s[1] * s[2] * s[3];
  return rows;
}

LseView dense_lse(const HostTensor& t) {  // (batch, heads, seq)
  const auto& s = t.shape();
  LseView lse;
  lse.data = static_cast<float*>(const_cast<void*>(t.data()));
  lse.row_stride = 1;
  lse.head_stride = s[2];
  lse.batch_stride = s[1] * s[2];
  return lse;
}

struct DenseAttention {
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  AttnProblem problem;

  DenseAttention(DType dtype, DType out_dtype, int64_t batch, int64_t sq, int64_t sk, int64_t hq,
                 int64_t hk, int64_t d, int64_t dv_, std::mt19937_64& rng)
      : q(dtype, {batch, sq, hq, d}),
        k(dtype, {batch, sk, hk, d}),
        v(dtype, {batch, sk, hk, dv_}),
        out(out_dtype, {batch, sq, hq, dv_}),
        lse(DType::F32, {batch, hq, sq}),
        dout(dtype, {batch, sq, hq, dv_}),
        dq(out_dtype, {batch, sq, hq, d}),
        dk(out_dtype, {batch, sk, hk, d}),
        dv(out_dtype, {batch, sk, hk, dv_}) {
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    dout.fill_normal(rng);
    out.poison();
    lse.poison();
    dq.poison();
    dk.poison();
    dv.poison();
    problem.dtype = dtype;
    problem.out_dtype = out_dtype;
    problem.batch = batch;
    problem.heads_q = hq;
    problem.heads_k = hk;
    problem.head_dim = d;
    problem.head_dim_v = dv_;
    problem.q = dense_rows(q);
    problem.k = dense_rows(k);
    problem.v = dense_rows(v);
    problem.out = dense_rows(out);
    problem.lse = dense_lse(lse);
    problem.lens.seqlen_q = sq;
    problem.lens.seqlen_k = sk;
    problem.score.scale = float(1.0 / std::sqrt(double(d)));
  }

  BwdProblem backward() const {
    BwdProblem b;
    b.fwd = problem;
    b.dout = dense_rows(dout);
    b.dout_dtype = dout.dtype();
    b.dq = dense_rows(dq);
    b.dk = dense_rows(dk);
    b.dv = dense_rows(dv);
    return b;
  }
};

// Element (b, s, h, c) of a dense (batch, seq, heads, dim) tensor.
float at(const HostTensor& t, int64_t b, int64_t s, int64_t h, int64_t c) {
  const auto& sh = t.shape();
  return t.get(((b * sh[1] + s) * sh[2] + h) * sh[3] + c);
}
float lse_at(const HostTensor& t, int64_t b, int64_t h, int64_t s) {
  const auto& sh = t.shape();
  return t.get((b * sh[1] + h) * sh[2] + s);
}

TEST(ReferenceForward, SingleKeyGivesItsValue) {
  std::mt19937_64 rng(1);
  DenseAttention a(DType::F32, DType::F32, 2, 4, 1, 3, 3, 16, 8, rng);
  cpu::reference::fwd(a.problem, Precision::Float64);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t h = 0; h < 3; ++h) {
        for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(at(a.out, b, i, h, c), at(a.v, b, 0, h, c));
        double s = 0;
        for (int64_t c = 0; c < 16; ++c) s += double(at(a.q, b, i, h, c)) * at(a.k, b, 0, h, c);
        EXPECT_NEAR(lse_at(a.lse, b, h, i), s * a.problem.score.scale, 1e-5);  // lse = the only logit
      }
}

TEST(ReferenceForward, UniformScoresAverageTheValues) {
  std::mt19937_64 rng(2);
  DenseAttention a(DType::F32, DType::F32, 1, 3, 7, 2, 1, 8, 8, rng);
  for (int64_t i = 0; i < a.q.numel(); ++i) a.q.set(i, 0.f);  // every score 0
  cpu::reference::fwd(a.problem, Precision::Float64);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t c = 0; c < 8; ++c) {
        double mean = 0;
        for (int64_t j = 0; j < 7; ++j) mean += at(a.v, 0, j, 0, c) / 7.0;
        EXPECT_NEAR(at(a.out, 0, i, h, c), mean, 1e-6);
      }
      EXPECT_NEAR(lse_at(a.lse, 0, h, i), std::log(7.0), 1e-6);
    }
}

TEST(ReferenceForward, FullyMaskedRowsGiveZeroAndMinusInfinity) {
  // Causal with sq > sk: rows i < sq - sk see no key (the diagonal is bottom-right aligned).
  std::mt19937_64 rng(3);
  DenseAttention a(DType::BF16, DType::BF16, 1, 5, 3, 2, 2, 8, 8, rng);
  a.problem.mask.window_right = 0;
  cpu::reference::fwd(a.problem, Precision::Float64);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      const float lse = lse_at(a.lse, 0, h, i);
      if (i < 2) {
        EXPECT_TRUE(std::isinf(lse) && lse < 0) << "row " << i;
        for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(at(a.out, 0, i, h, c), 0.f);
      } else {
        EXPECT_TRUE(std::isfinite(lse));
        for (int64_t c = 0; c < 8; ++c) EXPECT_TRUE(std::isfinite(at(a.out, 0, i, h, c)));
      }
    }
  // The backward writes zeros (not NaN) for those rows, and every key row.
  const BwdProblem b = a.backward();
  cpu::reference::bwd(b, Precision::Float64);
  for (float x : values_of(a.dq)) EXPECT_TRUE(std::isfinite(x));
  for (float x : values_of(a.dk)) EXPECT_TRUE(std::isfinite(x));
  for (float x : values_of(a.dv)) EXPECT_TRUE(std::isfinite(x));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(at(a.dq, 0, i, h, c), 0.f);
}

TEST(ReferenceForward, EmptyKeySequenceGivesZeroAndMinusInfinity) {
  std::mt19937_64 rng(4);
  DenseAttention a(DType::F16, DType::F16, 1, 3, 0, 1, 1, 8, 8, rng);
  cpu::reference::fwd(a.problem, Precision::InputPrecision);
  for (float x : values_of(a.out)) EXPECT_EQ(x, 0.f);
  for (float x : values_of(a.lse)) EXPECT_TRUE(std::isinf(x) && x < 0);
}

TEST(ReferenceForward, ProbabilitiesSumToOne) {
  // With v = 1 everywhere, out = sum_j P(i, j) (no dropout).
  std::mt19937_64 rng(5);
  for (Features f : {Features{}, Features{.causal = true, .softcap = 3.f, .alibi_slope = 0.4f},
                     Features{.window_left = 3, .window_right = 1}}) {
    HeadCase c(17, 23, 16, 4, f, rng);
    std::fill(c.v.begin(), c.v.end(), 1.0);
    const HeadForward out = cpu::reference::head_forward(c.problem());
    for (int64_t i = 0; i < 17; ++i)
      for (int64_t col = 0; col < 4; ++col) EXPECT_NEAR(out.out[size_t(i * 4 + col)], 1.0, 1e-13);
  }
}

TEST(ReferenceForward, SoftcapAndAlibiLogitsByHand) {
  // One query, two keys: out = sigmoid(l0 - l1) v0 + ..., with the logits written out.
  std::mt19937_64 rng(6);
  HeadCase c(1, 2, 1, 1, Features{.softcap = 2.f, .alibi_slope = 0.75f}, rng);
  c.q = {1.0};
  c.k = {0.5, -1.5};
  c.v = {3.0, -1.0};
  c.scale = 1.25f;
  const HeadForward f = cpu::reference::head_forward(c.problem());
  // sq = 1, sk = 2: the diagonal key of row 0 is 1, so key 0 is at distance 1, key 1 at 0.
  const double l0 = 2.0 * std::tanh(0.5 * 1.25 / 2.0) - 0.75 * 1;
  const double l1 = 2.0 * std::tanh(-1.5 * 1.25 / 2.0);
  const double p0 = 1.0 / (1.0 + std::exp(l1 - l0));
  EXPECT_NEAR(f.out[0], p0 * 3.0 + (1 - p0) * -1.0, 1e-15);
  EXPECT_NEAR(f.lse[0], std::log(std::exp(l0) + std::exp(l1)), 1e-15);
}

TEST(ReferenceForward, ExtremeLogitsStayFinite) {
  // Huge logits overflow a naive exp; the max-subtracted softmax must not.
  std::mt19937_64 rng(7);
  HeadCase c(2, 3, 2, 2, Features{}, rng);
  c.q = {400.0, 0.0, -400.0, 0.0};
  c.k = {4.0, 0.0, 3.0, 0.0, 2.0, 0.0};
  c.scale = 1.f;
  const HeadForward f = cpu::reference::head_forward(c.problem());
  for (double x : f.out) EXPECT_TRUE(std::isfinite(x));
  EXPECT_NEAR(f.lse[0], 1600.0, 1e-9);
  EXPECT_NEAR(f.lse[1], -800.0, 1e-9);
}

// ---------------------------------------------------------------------------------------------
// Dropout
// ---------------------------------------------------------------------------------------------

TEST(ReferenceDropout, KeepsAboutOneMinusPOfTheWeights) {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const uint32_t threshold = dropout_threshold(p);
    int64_t kept = 0, total = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 700; ++i)
          for (int64_t j = 0; j < 700; ++j, ++total)
            kept += dropout_keep(0x1234abcdull, 77, b, 3, h, i, j, threshold) ? 1 : 0;
    const double fraction = double(kept) / double(total);
    const double sigma = std::sqrt(double(p) * (1 - p) / double(total));
    EXPECT_NEAR(fraction, 1.0 - p, 8 * sigma) << "p=" << p;  // 8 sigma: never flaky
  }
}

TEST(ReferenceDropout, MaskIsAPureFunctionOfItsCoordinates) {
  const uint32_t threshold = dropout_threshold(0.5f);
  // Visiting (h, i, j) forwards and backwards gives the same bits: no hidden state.
  constexpr int64_t kCount = 4 * 40 * 40;
  std::vector<uint8_t> forwards(kCount), backwards(kCount);
  for (int64_t n = 0; n < kCount; ++n) {
    const int64_t m = kCount - 1 - n;
    forwards[size_t(n)] = dropout_keep(42, 7, 1, 4, n / 1600, (n / 40) % 40, n % 40, threshold);
    backwards[size_t(m)] = dropout_keep(42, 7, 1, 4, m / 1600, (m / 40) % 40, m % 40, threshold);
  }
  EXPECT_EQ(forwards, backwards);
  // Different seeds, offsets, heads and batches give different masks; (batch, head) only enter
  // through offset + batch * heads + head.
  int diff_seed = 0, diff_head = 0, same_linear = 0;
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 40; ++j) {
      const bool base = dropout_keep(42, 7, 1, 4, 2, i, j, threshold);
      diff_seed += base != dropout_keep(43, 7, 1, 4, 2, i, j, threshold);
      diff_head += base != dropout_keep(42, 7, 1, 4, 3, i, j, threshold);
      same_linear += base == dropout_keep(42, 13, 0, 4, 0, i, j, threshold);  // 7 + 4 + 2 = 13
    }
  EXPECT_GT(diff_seed, 600);
  EXPECT_GT(diff_head, 600);
  EXPECT_EQ(same_linear, 1600);
}

TEST(ReferenceDropout, ForwardScalesKeptWeightsByOneOverKeepProbability) {
  // One key: P = 1, so out = v * keep / (1 - p) with keep the Philox bit of (b, h, i, 0).
  std::mt19937_64 rng(8);
  DenseAttention a(DType::F32, DType::F32, 2, 64, 1, 3, 3, 8, 4, rng);
  a.problem.dropout_p = 0.25f;
  a.problem.dropout_seed = 0xfeedfacecafebeefull;
  a.problem.dropout_offset = 5;
  cpu::reference::fwd(a.problem, Precision::Float64);
  const uint32_t threshold = dropout_threshold(0.25f);
  int kept = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < 64; ++i) {
        const bool keep = dropout_keep(a.problem.dropout_seed, 5, b, 3, h, i, 0, threshold);
        kept += keep;
        for (int64_t c = 0; c < 4; ++c)
          EXPECT_FLOAT_EQ(at(a.out, b, i, h, c), keep ? at(a.v, b, 0, h, c) / 0.75f : 0.f);
        // The LSE is that of the undropped softmax: the one logit, dropped or not.
        double s = 0;
        for (int64_t c = 0; c < 8; ++c) s += double(at(a.q, b, i, h, c)) * at(a.k, b, 0, h, c);
        EXPECT_NEAR(lse_at(a.lse, b, h, i), s * a.problem.score.scale, 1e-5);
      }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 2 * 3 * 64);
}

// ---------------------------------------------------------------------------------------------
// Whole-problem plumbing: the problem-level entry points agree with the core
// ---------------------------------------------------------------------------------------------

TEST(ReferenceProblem, GqaBackwardSumsQueryHeadsAndMatchesCore) {
  std::mt19937_64 rng(9);
  DenseAttention a(DType::F32, DType::F32, 2, 5, 6, 4, 2, 8, 8, rng);
  a.problem.mask.window_right = 0;
  a.problem.score.softcap = 1.5f;
  cpu::reference::fwd(a.problem, Precision::Float64);
  cpu::reference::bwd(a.backward(), Precision::Float64);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hk = 0; hk < 2; ++hk) {
      std::vector<double> dk(6 * 8, 0.0), dv(6 * 8, 0.0);
      for (int64_t h = 2 * hk; h < 2 * hk + 2; ++h) {
        std::vector<double> q, k, v, dout;
        for (int64_t i = 0; i < 5; ++i)
          for (int64_t c = 0; c < 8; ++c) {
            q.push_back(at(a.q, b, i, h, c));
            dout.push_back(at(a.dout, b, i, h, c));
          }
        for (int64_t j = 0; j < 6; ++j)
          for (int64_t c = 0; c < 8; ++c) {
            k.push_back(at(a.k, b, j, hk, c));
            v.push_back(at(a.v, b, j, hk, c));
          }
        HeadProblem head;
        head.seqlen_q = 5;
        head.seqlen_k = 6;
        head.head_dim = head.head_dim_v = 8;
        head.q = q.data();
        head.k = k.data();
        head.v = v.data();
        head.score = a.problem.score;
        head.mask = a.problem.mask;
        const HeadForward f = cpu::reference::head_forward(head);
        const HeadGradients g = cpu::reference::head_backward(head, dout.data());
        for (int64_t i = 0; i < 5; ++i)
          for (int64_t c = 0; c < 8; ++c) {
            EXPECT_EQ(at(a.out, b, i, h, c), float(f.out[size_t(i * 8 + c)]));
            EXPECT_EQ(at(a.dq, b, i, h, c), float(g.dq[size_t(i * 8 + c)]));
          }
        for (size_t n = 0; n < dk.size(); ++n) {
          dk[n] += g.dk[n];
          dv[n] += g.dv[n];
        }
      }
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t c = 0; c < 8; ++c) {
          EXPECT_EQ(at(a.dk, b, j, hk, c), float(dk[size_t(j * 8 + c)]));
          EXPECT_EQ(at(a.dv, b, j, hk, c), float(dv[size_t(j * 8 + c)]));
        }
    }
}

TEST(ReferenceProblem, KeysNoQuerySeesGetZeroGradients) {
  // A window of one key per row with sq < sk leaves the first keys unseen.
  std::mt19937_64 rng(10);
  DenseAttention a(DType::BF16, DType::F32, 1, 3, 9, 2, 1, 8, 8, rng);
  a.problem.mask = MaskParams{0, 0};
  cpu::reference::bwd(a.backward(), Precision::InputPrecision);
  for (int64_t j = 0; j < 9; ++j)
    for (int64_t c = 0; c < 8; ++c) {
      if (j < 6) {
        EXPECT_EQ(at(a.dk, 0, j, 0, c), 0.f);
        EXPECT_EQ(at(a.dv, 0, j, 0, c), 0.f);
      } else {
        EXPECT_TRUE(std::isfinite(at(a.dk, 0, j, 0, c)));
        EXPECT_NE(at(a.dv, 0, j, 0, c), 0.f);
      }
    }
}

TEST(ReferenceProblem, VarlenAndPagedStorageMatchDenseRuns) {
  // Two sequences (lengths q 3/5, k 4/7) packed varlen for q/out/lse and paged (page size 2)
  // for k/v must give what each sequence gives alone in dense storage.
  std::mt19937_64 rng(11);
  const int64_t hq = 2, hk = 1, d = 8, page = 2;
  const std::vector<int32_t> cu_q = {0, 3, 8}, cu_k = {0, 4, 11};
  HostTensor q(DType::F16, {8, hq, d}), out(DType::F32, {8, hq, d}), lse(DType::F32, {hq, 8});
  q.fill_normal(rng);
  out.poison();
  lse.poison();
  // Pages: sequence 0 uses pages {5, 1}, sequence 1 uses {0, 3, 6, 2} (7 keys, last page half full).
  const std::vector<int32_t> block_table = {5, 1, -1, -1, 0, 3, 6, 2};
  HostTensor k_pages(DType::F16, {7, page, hk, d}), v_pages(DType::F16, {7, page, hk, d});
  k_pages.fill_normal(rng);
  v_pages.fill_normal(rng);

  AttnProblem p;
  p.dtype = DType::F16;
  p.out_dtype = DType::F32;
  p.batch = 2;
  p.heads_q = hq;
  p.heads_k = hk;
  p.head_dim = p.head_dim_v = d;
  p.lens.seqlen_q = 5;
  p.lens.seqlen_k = 7;
  p.lens.cu_seqlens_q = cu_q.data();
  p.lens.cu_seqlens_k = cu_k.data();
  p.lens.total_q = 8;
  p.lens.k_capacity = 4 * page;  // (the bounds index contents are clamped to: common/rows.h)
  p.q.data = q.data();
  p.q.row_stride = hq * d;
  p.q.head_stride = d;
  p.q.cu_seqlens = cu_q.data();
  p.q.extent = 8;
  p.out = p.q;
  p.out.data = out.data();
  p.lse.data = lse.as<float>();
  p.lse.head_stride = 8;
  p.lse.cu_seqlens = cu_q.data();
  p.lse.total = 8;
  for (RowsView* kv : {&p.k, &p.v}) {
    kv->batch_stride = page * hk * d;
    kv->row_stride = hk * d;
    kv->head_stride = d;
    kv->block_table = block_table.data();
    kv->block_table_stride = 4;
    kv->page_size = page;
    kv->extent = 7;
  }
  p.k.data = k_pages.data();
  p.v.data = v_pages.data();
  p.mask.window_right = 0;
  p.score.scale = 0.3f;
  cpu::reference::fwd(p, Precision::Float64);

  for (int64_t b = 0; b < 2; ++b) {
    const int64_t sq = cu_q[b + 1] - cu_q[b], sk = cu_k[b + 1] - cu_k[b];
    DenseAttention dense(DType::F16, DType::F32, 1, sq, sk, hq, hk, d, d, rng);
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t c = 0; c < d; ++c) dense.q.set((i * hq + h) * d + c, q.get(((cu_q[b] + i) * hq + h) * d + c));
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t c = 0; c < d; ++c) {
        const int64_t paged = (block_table[size_t(b * 4 + j / page)] * page + j % page) * d + c;
        dense.k.set(j * d + c, k_pages.get(paged));
        dense.v.set(j * d + c, v_pages.get(paged));
      }
    dense.problem.mask = p.mask;
    dense.problem.score = p.score;
    cpu::reference::fwd(dense.problem, Precision::Float64);
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        for (int64_t c = 0; c < d; ++c)
          EXPECT_EQ(out.get(((cu_q[b] + i) * hq + h) * d + c), at(dense.out, 0, i, h, c));
        EXPECT_EQ(lse.get(h * 8 + cu_q[b] + i), lse_at(dense.lse, 0, h, i));
      }
  }
}

TEST(ReferenceProblem, Float64RoundsOnceAtTheStore) {
  // 1 + 2^-8 + 2^-30 is just above the bf16 tie between 1 and 1 + 2^-7; rounding it to float
  // first would land exactly on the tie and round to even (1.0).
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  const float narrowed = cpu::reference::narrow_for_store(x, DType::BF16);
  EXPECT_EQ(numeric::bf16_to_float(numeric::float_to_bf16(narrowed)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(numeric::bf16_to_float(numeric::float_to_bf16(float(x))), 1.0f);  // the trap avoided
  EXPECT_EQ(cpu::reference::narrow_for_store(x, DType::F32), float(x));
  EXPECT_EQ(cpu::reference::narrow_for_store(-0.75, DType::F16), -0.75f);
  EXPECT_EQ(cpu::reference::narrow_for_store(1e300, DType::F16), std::numeric_limits<float>::max());
}

TEST(ReferencePrecision, InputPrecisionErrorIsSmallButNotZero) {
  std::mt19937_64 rng(12);
  const int64_t n = 128, d = 64;
  for (DType dtype : {DType::BF16, DType::F16}) {
    DenseAttention exact(dtype, DType::F32, 1, n, n, 2, 2, d, d, rng);
    DenseAttention emulated(dtype, DType::F32, 1, n, n, 2, 2, d, d, rng);
    copy_values(exact.q, emulated.q);
    copy_values(exact.k, emulated.k);
    copy_values(exact.v, emulated.v);
    copy_values(exact.dout, emulated.dout);
    exact.problem.mask.window_right = emulated.problem.mask.window_right = 0;
    cpu::reference::fwd(exact.problem, Precision::Float64);
    cpu::reference::fwd(emulated.problem, Precision::InputPrecision);
    cpu::reference::bwd(exact.backward(), Precision::Float64);
    cpu::reference::bwd(emulated.backward(), Precision::InputPrecision);
    const double eps = dtype == DType::BF16 ? 1.0 / 256 : 1.0 / 2048;  // unit roundoff * 2
    for (auto [e, m, name] : {std::tuple{&exact.out, &emulated.out, "out"},
                              std::tuple{&exact.dq, &emulated.dq, "dq"},
                              std::tuple{&exact.dk, &emulated.dk, "dk"},
                              std::tuple{&exact.dv, &emulated.dv, "dv"}}) {
      const double err = test::max_abs_diff(values_of(*e), values_of(*m));
      const double scale = test::max_abs(values_of(*e));
      SCOPED_TRACE(::testing::Message() << (dtype == DType::BF16 ? "bf16 " : "fp16 ") << name);
      // Measured ratios err / (eps * scale) are 0.4 .. 2.2 for these shapes.
      EXPECT_GT(err, 0.05 * eps * scale);  // the emulation really rounds
      EXPECT_LT(err, 8 * eps * scale);     // ... by about the dtype's precision, no more
    }
    EXPECT_LT(test::max_abs_diff(values_of(exact.lse), values_of(emulated.lse)),
              8 * eps * test::max_abs(values_of(exact.lse)));
  }
}

TEST(ReferencePrecision, InputPrecisionRoundsProbabilitiesToTheDtype) {
  // Three equal scores: P = 1/3, which bf16 holds as 0x3eab = 0.333984375. With v = 1 the
  // output is the row sum of the rounded P (float accumulation), 1.001953125, not 1.
  std::mt19937_64 rng(18);
  DenseAttention a(DType::BF16, DType::F32, 1, 2, 3, 1, 1, 8, 4, rng);
  for (int64_t i = 0; i < a.q.numel(); ++i) a.q.set(i, 0.f);
  for (int64_t i = 0; i < a.v.numel(); ++i) a.v.set(i, 1.f);
  cpu::reference::fwd(a.problem, Precision::InputPrecision);
  for (float x : values_of(a.out)) EXPECT_EQ(x, 3 * 0.333984375f);
  cpu::reference::fwd(a.problem, Precision::Float64);
  for (float x : values_of(a.out)) EXPECT_EQ(x, 1.f);
}

// ---------------------------------------------------------------------------------------------
// KV cache: append with rotary, rotate q, attend
// ---------------------------------------------------------------------------------------------

TEST(ReferenceKvCache, RotaryByHandOnAppendedKeys) {
  // d = rotary_dim = 4. cos/sin rows: position 2 rotates pair 0 by +90 degrees, pair 1 by 0.
  for (bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "neox");
    const int64_t d = 4, cache_len = 4;
    HostTensor k_cache(DType::F32, {1, cache_len, 1, d}), v_cache(DType::F32, {1, cache_len, 1, d});
    HostTensor k_new(DType::F32, {1, 1, 1, d}), v_new(DType::F32, {1, 1, 1, d});
    HostTensor q(DType::F32, {1, 1, 1, d}), out(DType::F32, {1, 1, 1, d});
    HostTensor cos(DType::F32, {4, 2}), sin(DType::F32, {4, 2});
    for (int64_t i = 0; i < 8; ++i) {
      cos.set(i, 1.f);
      sin.set(i, 0.f);
    }
    cos.set(2 * 2 + 0, 0.f);
    sin.set(2 * 2 + 0, 1.f);
    for (int64_t c = 0; c < d; ++c) {
      k_new.set(c, float(c + 1));  // a b c d = 1 2 3 4
      v_new.set(c, float(10 * (c + 1)));
      q.set(c, float(c + 1));
    }
    std::mt19937_64 rng(13);
    k_cache.fill_normal(rng);
    v_cache.fill_normal(rng);
    const std::vector<float> k_before = values_of(k_cache);
    const std::vector<int32_t> cache_seqlens = {2};

    KvCacheProblem kv;
    AttnProblem& p = kv.attn;
    p.dtype = p.out_dtype = DType::F32;
    p.batch = p.heads_q = p.heads_k = 1;
    p.head_dim = p.head_dim_v = d;
    p.q = dense_rows(q);
    p.k = dense_rows(k_cache);
    p.v = dense_rows(v_cache);
    p.out = dense_rows(out);
    p.lens.seqlen_q = 1;
    p.lens.seqlen_k = cache_len;
    p.lens.cache_seqlens = cache_seqlens.data();
    p.lens.seqlen_k_added = 1;
    p.mask.window_right = 0;
    p.score.scale = 0.5f;
    kv.k_new = dense_rows(k_new);
    kv.v_new = dense_rows(v_new);
    kv.seqlen_new = 1;
    kv.rotary = RotaryParams{cos.data(), sin.data(), 2, d, 4, interleaved};
    kv.rotary_q_per_row = true;
    cpu::reference::fwd_kvcache(kv, Precision::Float64);

    // Row 2 of the cache holds the rotated k_new: NeoX pairs (x0, x2), interleaved (x0, x1).
    const std::vector<float> expected_k =
        interleaved ? std::vector<float>{-2, 1, 3, 4} : std::vector<float>{-3, 2, 1, 4};
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_EQ(at(k_cache, 0, 2, 0, c), expected_k[size_t(c)]);
      EXPECT_EQ(at(v_cache, 0, 2, 0, c), float(10 * (c + 1)));
      EXPECT_EQ(at(k_cache, 0, 0, 0, c), k_before[size_t(c)]);      // before: untouched
      EXPECT_EQ(at(k_cache, 0, 3, 0, c), k_before[size_t(3 * d + c)]);  // after: untouched
    }
    // q (at position 2) is rotated the same way, so the output is attention of that q over keys
    // 0..2 (key 3 is beyond cache_seqlens + seqlen_new).
    std::vector<double> qd(expected_k.begin(), expected_k.end()), kd, vd;
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t c = 0; c < d; ++c) {
        kd.push_back(at(k_cache, 0, j, 0, c));
        vd.push_back(at(v_cache, 0, j, 0, c));
      }
    HeadProblem head;
    head.seqlen_q = 1;
    head.seqlen_k = 3;
    head.head_dim = head.head_dim_v = d;
    head.q = qd.data();
    head.k = kd.data();
    head.v = vd.data();
    head.score = p.score;
    head.mask = p.mask;
    const HeadForward f = cpu::reference::head_forward(head);
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(out.get(c), float(f.out[size_t(c)]));
    EXPECT_EQ(q.get(0), 1.f);  // the caller's q is not modified
  }
}

TEST(ReferenceKvCache, PositionsFollowCacheSeqlensAndBatchIndex) {
  // Two batch entries stored in cache rows {1, 0}, cache_seqlens {3, 1}, two new tokens each;
  // q rows share the first new position (rotary_q_per_row = false). Compared against rotating
  // by hand at angle = position * theta_k and running fwd on the result.
  std::mt19937_64 rng(15);
  const int64_t batch = 2, sq = 2, seqlen_new = 2, hq = 2, hk = 1, d = 8, rd = 4, cache_len = 6;
  const std::vector<int32_t> cache_seqlens = {3, 1}, batch_idx = {1, 0};
  HostTensor q(DType::BF16, {batch, sq, hq, d}), out(DType::F32, {batch, sq, hq, d});
  HostTensor k_cache(DType::BF16, {2, cache_len, hk, d}), v_cache(DType::BF16, {2, cache_len, hk, d});
  HostTensor k_new(DType::BF16, {batch, seqlen_new, hk, d}), v_new(DType::BF16, {batch, seqlen_new, hk, d});
  HostTensor cos(DType::BF16, {cache_len, rd / 2}), sin(DType::BF16, {cache_len, rd / 2});
  for (HostTensor* t : {&q, &k_cache, &v_cache, &k_new, &v_new}) t->fill_normal(rng);
  for (int64_t pos = 0; pos < cache_len; ++pos)
    for (int64_t k = 0; k < rd / 2; ++k) {
      const double angle = double(pos) * std::pow(100.0, -double(k) / double(rd / 2));
      cos.set(pos * (rd / 2) + k, float(std::cos(angle)));
      sin.set(pos * (rd / 2) + k, float(std::sin(angle)));
    }
  HostTensor k_expected(DType::BF16, k_cache.shape()), v_expected(DType::BF16, v_cache.shape());
  copy_values(k_cache, k_expected);
  copy_values(v_cache, v_expected);
  // NeoX rotation of one row in double, rounded once to bf16.
  const auto rotate = [&](std::vector<float>& x, int64_t pos) {
    for (int64_t k = 0; k < rd / 2; ++k) {
      const double c = cos.get(pos * (rd / 2) + k), s = sin.get(pos * (rd / 2) + k);
      const double x1 = x[size_t(k)], x2 = x[size_t(k + rd / 2)];
      x[size_t(k)] = cpu::reference::narrow_for_store(x1 * c - x2 * s, DType::BF16);
      x[size_t(k + rd / 2)] = cpu::reference::narrow_for_store(x1 * s + x2 * c, DType::BF16);
    }
    for (float& e : x) e = cpu::round_to(DType::BF16, e);
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seqlen_new; ++t) {
      std::vector<float> row(static_cast<size_t>(d));
      for (int64_t c = 0; c < d; ++c) row[size_t(c)] = at(k_new, b, t, 0, c);
      rotate(row, cache_seqlens[size_t(b)] + t);
      for (int64_t c = 0; c < d; ++c) {
        const int64_t dst = ((batch_idx[size_t(b)] * cache_len) + cache_seqlens[size_t(b)] + t) * d + c;
        k_expected.set(dst, row[size_t(c)]);
        v_expected.set(dst, at(v_new, b, t, 0, c));
      }
    }
  HostTensor q_rotated(DType::BF16, q.shape());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        std::vector<float> row(static_cast<size_t>(d));
        for (int64_t c = 0; c < d; ++c) row[size_t(c)] = at(q, b, i, h, c);
        rotate(row, cache_seqlens[size_t(b)]);
        for (int64_t c = 0; c < d; ++c) q_rotated.set(((b * sq + i) * hq + h) * d + c, row[size_t(c)]);
      }

  KvCacheProblem kv;
  AttnProblem& p = kv.attn;
  p.dtype = DType::BF16;
  p.out_dtype = DType::F32;
  p.batch = batch;
  p.heads_q = hq;
  p.heads_k = hk;
  p.head_dim = p.head_dim_v = d;
  p.q = dense_rows(q);
  p.k = dense_rows(k_cache);
  p.v = dense_rows(v_cache);
  p.k.batch_index = p.v.batch_index = batch_idx.data();
  p.k.extent = p.v.extent = 2;  // cache rows (the bound batch_index entries are clamped to)
  p.out = dense_rows(out);
  p.lens.seqlen_q = sq;
  p.lens.seqlen_k = cache_len;
  p.lens.cache_seqlens = cache_seqlens.data();
  p.lens.seqlen_k_added = seqlen_new;
  p.score.scale = 0.35f;
  kv.k_new = dense_rows(k_new);
  kv.v_new = dense_rows(v_new);
  kv.seqlen_new = seqlen_new;
  kv.rotary = RotaryParams{cos.data(), sin.data(), rd / 2, rd, cache_len, false};
  kv.rotary_q_per_row = false;
  cpu::reference::fwd_kvcache(kv, Precision::Float64);

  EXPECT_EQ(values_of(k_cache), values_of(k_expected));
  EXPECT_EQ(values_of(v_cache), values_of(v_expected));

  // The same attention with the hand-rotated q over the updated cache.
  HostTensor out_expected(DType::F32, {batch, sq, hq, d});
  AttnProblem plain = p;
  plain.q = dense_rows(q_rotated);
  plain.out = dense_rows(out_expected);
  cpu::reference::fwd(plain, Precision::Float64);
  EXPECT_EQ(values_of(out), values_of(out_expected));
}

// ---------------------------------------------------------------------------------------------
// Speed: the oracle must stay usable at seqlen ~1k
// ---------------------------------------------------------------------------------------------

TEST(ReferenceSpeed, ThousandByThousandHeadIsQuick) {
  std::mt19937_64 rng(16);
  HeadCase c(1024, 1024, 256, 256, Features{.causal = true}, rng);
  const auto start = std::chrono::steady_clock::now();
  const HeadForward f = cpu::reference::head_forward(c.problem());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(std::isfinite(f.lse.back()));
  EXPECT_LT(seconds, 20.0);  // a generous bound (debug builds, loaded CI); ~0.2 s when optimised
  RecordProperty("seconds", std::to_string(seconds));
}

// ---------------------------------------------------------------------------------------------
// Philox4x32-10: the Random123 known-answer vectors
// ---------------------------------------------------------------------------------------------

TEST(Philox, Random123KnownAnswers) {
  struct Vector {
    Philox4 counter;
    uint32_t k0, k1;
    Philox4 expected;
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu,
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Vector& v : vectors) {
    const Philox4 r = philox4x32_10(v.counter, v.k0, v.k1);
    EXPECT_EQ(r.x, v.expected.x);
    EXPECT_EQ(r.y, v.expected.y);
    EXPECT_EQ(r.z, v.expected.z);
    EXPECT_EQ(r.w, v.expected.w);
  }
}

TEST(Philox, DropoutThresholdAndWordSelection) {
  EXPECT_EQ(dropout_threshold(0.f), 0u);
  EXPECT_EQ(dropout_threshold(0.5f), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.25f), 0x40000000u);
  // Key j uses word j % 4 of the counter block j / 4.
  const Philox4 block = dropout_bits(7, 3, 1, 4, 2, 5, 9);
  const Philox4 direct = philox4x32_10(Philox4{2, 5, 3 + 1 * 4 + 2, 0}, 7, 0);
  EXPECT_EQ(block.x, direct.x);
  EXPECT_EQ(block.w, direct.w);
  const uint32_t threshold = philox_word(block, 1);  // key 9 is word 1: keep iff r >= threshold
  EXPECT_TRUE(dropout_keep(7, 3, 1, 4, 2, 5, 9, threshold));
  EXPECT_FALSE(dropout_keep(7, 3, 1, 4, 2, 5, 9, threshold + 1));
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16 / fp8 e4m3 conversions
// ---------------------------------------------------------------------------------------------

// Correctly rounded conversion computed with double arithmetic: round |x| to a multiple of the
// format's quantum at x's binade (nearest, ties to even via nearbyint), then apply the range.
// mantissa_bits: stored fraction bits; min_exp: exponent of the smallest normal.
double round_reference(float x, int mantissa_bits, int min_exp) {
  const double a = std::fabs(double(x));
  if (a == 0) return x;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the binade's exponent is e - 1
  const int binade = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, binade - mantissa_bits);
  const double rounded = std::nearbyint(a / quantum) * quantum;  // a / quantum is exact
  return std::copysign(rounded, double(x));
}

double fp16_reference(float x) {
  if (std::isinf(x)) return x;
  const double r = round_reference(x, 10, -14);
  return std::fabs(r) > 65504.0 ? std::copysign(kInf, r) : r;
}
double bf16_reference(float x) {
  if (std::isinf(x)) return x;
  const double r = round_reference(x, 7, -126);
  return std::fabs(r) > double(std::numeric_limits<float>::max()) ? std::copysign(kInf, r) : r;
}
double e4m3_reference(float x) {  // saturating: out of range (and infinity) clamps to +-448
  if (std::isinf(x)) return std::copysign(448.0, double(x));
  const double r = round_reference(x, 3, -6);
  return std::fabs(r) > 448.0 ? std::copysign(448.0, r) : r;
}

// Same value, and the same sign for zeros.
bool same_value(double expected, float actual) {
  return expected == double(actual) && std::signbit(expected) == std::signbit(actual);
}

TEST(Numeric, Fp16RoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t h = uint16_t(bits);
    const float x = numeric::fp16_to_float(h);
    const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    EXPECT_EQ(std::isnan(x), is_nan) << std::hex << bits;
    if (is_nan) {
      const uint16_t back = numeric::float_to_fp16(x);
      EXPECT_TRUE((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu) != 0) << std::hex << bits;
    } else {
      EXPECT_EQ(numeric::float_to_fp16(x), h) << std::hex << bits;
      EXPECT_TRUE(same_value(fp16_reference(x), x)) << std::hex << bits;  // decoding is exact
    }
  }
}

TEST(Numeric, Bf16RoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t h = uint16_t(bits);
    const float x = numeric::bf16_to_float(h);
    const bool is_nan = (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
    EXPECT_EQ(std::isnan(x), is_nan) << std::hex << bits;
    if (is_nan)
      EXPECT_TRUE(std::isnan(numeric::bf16_to_float(numeric::float_to_bf16(x)))) << std::hex << bits;
    else
      EXPECT_EQ(numeric::float_to_bf16(x), h) << std::hex << bits;
  }
}

TEST(Numeric, E4m3RoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 0x100u; ++bits) {
    const uint8_t b = uint8_t(bits);
    const float x = numeric::e4m3_to_float(b);
    const bool is_nan = (b & 0x7fu) == 0x7fu;
    EXPECT_EQ(std::isnan(x), is_nan) << std::hex << bits;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(numeric::e4m3_to_float(numeric::float_to_e4m3(x))));
    } else {
      EXPECT_EQ(numeric::float_to_e4m3(x), b) << std::hex << bits;
      EXPECT_TRUE(same_value(e4m3_reference(x), x)) << std::hex << bits;
    }
  }
  EXPECT_EQ(numeric::e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(numeric::e4m3_to_float(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(numeric::e4m3_to_float(0x08), std::ldexp(1.f, -6));
}

// Every midpoint between neighbouring finite values rounds to the even one; just off the
// midpoint it rounds to the nearer one.
template <typename Decode, typename Encode>
void expect_ties_to_even(int patterns, int sign_bit, Decode decode, Encode encode,
                         bool (*is_finite_pattern)(uint32_t)) {
  for (uint32_t lo = 0; lo + 1 < uint32_t(patterns); ++lo) {
    if ((lo & uint32_t(sign_bit)) || !is_finite_pattern(lo) || !is_finite_pattern(lo + 1)) continue;
    const float a = decode(lo), b = decode(lo + 1);  // neighbours: lo + 1 is the next value up
    const float mid = float((double(a) + double(b)) / 2);  // exact in float for these formats
    ASSERT_EQ(double(mid), (double(a) + double(b)) / 2);
    const uint32_t even = (lo & 1u) ? lo + 1 : lo;
    EXPECT_EQ(uint32_t(encode(mid)), even) << std::hex << lo;
    EXPECT_EQ(uint32_t(encode(-mid)), even | uint32_t(sign_bit)) << std::hex << lo;
    EXPECT_EQ(uint32_t(encode(std::nextafter(mid, 0.f))), lo) << std::hex << lo;
    EXPECT_EQ(uint32_t(encode(std::nextafter(mid, INFINITY))), lo + 1) << std::hex << lo;
  }
}

TEST(Numeric, RoundToNearestEvenOnTies) {
  expect_ties_to_even(
      0x10000, 0x8000, numeric::fp16_to_float, numeric::float_to_fp16,
      [](uint32_t h) { return (h & 0x7c00u) != 0x7c00u; });
  expect_ties_to_even(
      0x10000, 0x8000, numeric::bf16_to_float, numeric::float_to_bf16,
      [](uint32_t h) { return (h & 0x7f80u) != 0x7f80u; });
  expect_ties_to_even(
      0x100, 0x80, numeric::e4m3_to_float, numeric::float_to_e4m3,
      [](uint32_t b) { return (b & 0x7fu) != 0x7fu; });
  // Past the largest finite value: fp16/bf16 ties round to infinity (the even neighbour),
  // e4m3 saturates to 448.
  EXPECT_EQ(numeric::float_to_fp16(65519.996f), 0x7bffu);
  EXPECT_EQ(numeric::float_to_fp16(65520.f), 0x7c00u);
  EXPECT_EQ(numeric::float_to_fp16(-1e30f), 0xfc00u);
  EXPECT_EQ(numeric::float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(numeric::float_to_e4m3(463.99f), 0x7eu);
  EXPECT_EQ(numeric::float_to_e4m3(464.f), 0x7eu);
  EXPECT_EQ(numeric::float_to_e4m3(1e9f), 0x7eu);
  EXPECT_EQ(numeric::float_to_e4m3(-INFINITY), 0xfeu);
  EXPECT_TRUE(std::isnan(numeric::e4m3_to_float(numeric::float_to_e4m3(NAN))));
}

// Random floats over every exponent (subnormal inputs, results that underflow to zero or
// overflow) against the double-arithmetic rounding above.
TEST(Numeric, ConversionsMatchDoubleArithmeticOnRandomFloats) {
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<uint32_t> any_bits;
  int checked = 0;
  for (int n = 0; n < 4'000'000; ++n) {
    uint32_t bits = any_bits(rng);
    if (n % 2 == 1) {
      // Half the draws confined to exponents around the fp16/e4m3 ranges (2^-30 .. 2^20).
      const uint32_t exponent = 97u + (bits >> 24) % 50u;
      bits = (bits & 0x807fffffu) | (exponent << 23);
    }
    float x;
    std::memcpy(&x, &bits, 4);
    if (std::isnan(x)) continue;
    ++checked;
    const float h = numeric::fp16_to_float(numeric::float_to_fp16(x));
    const float b = numeric::bf16_to_float(numeric::float_to_bf16(x));
    const float e = numeric::e4m3_to_float(numeric::float_to_e4m3(x));
    if (!same_value(fp16_reference(x), h)) {
      ADD_FAILURE() << "fp16 of " << x << " (0x" << std::hex << bits << "): " << h;
      return;
    }
    if (!same_value(bf16_reference(x), b)) {
      ADD_FAILURE() << "bf16 of " << x << " (0x" << std::hex << bits << "): " << b;
      return;
    }
    if (!same_value(e4m3_reference(x), e)) {
      ADD_FAILURE() << "e4m3 of " << x << " (0x" << std::hex << bits << "): " << e;
      return;
    }
  }
  EXPECT_GT(checked, 3'900'000);
}

}  // namespace
}  // namespace flashattn
