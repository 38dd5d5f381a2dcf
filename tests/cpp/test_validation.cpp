// Validation: one test per rule (a valid call with exactly one thing broken must fail with the
// right code, argument and message), the normalised problems the builders fill, backend choice
// for host and CUDA views, and a fuzz over random mutations that must never crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>

#include "api/validate.h"
#include "status_assertions.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

using api::make_bwd_problem;
using api::make_combine_problem;
using api::make_fwd_problem;
using api::make_kvcache_problem;

// A fake device address: CUDA views are never dereferenced by validation.
void* fake_device_pointer(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t(1) << 40 | offset); }

TensorView on_cuda(TensorView view, void* data, int index = 0) {
  view.device = DeviceType::Cuda;
  view.device_index = index;
  view.data = data;
  return view;
}

// A caller's workspace allocator for the GPU scratch: the rule is that allocate and release come
// together. Validation never calls them.
void* workspace_allocate(std::size_t, void*, void*) { return nullptr; }
void workspace_release(void*, void*, void*) {}

// ---------------------------------------------------------------------------------------------
// Forward, dense: batch 2, seqlen_q 5, seqlen_k 7, heads 4/2 (GQA), head_dim 16, head_dim_v 32.
// ---------------------------------------------------------------------------------------------
class FwdRules : public ::testing::Test {
 protected:
  FwdRules() {
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
  }
  Status build() { return make_fwd_problem(p, &problem); }

  HostTensor q{DType::F16, {2, 5, 4, 16}}, k{DType::F16, {2, 7, 2, 16}}, v{DType::F16, {2, 7, 2, 32}};
  HostTensor out{DType::F16, {2, 5, 4, 32}}, lse{DType::F32, {2, 4, 5}};
  FwdParams p;
  AttnProblem problem;
};

TEST_F(FwdRules, ValidCallPassesAndFillsTheProblem) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.dtype, DType::F16);
  EXPECT_EQ(problem.out_dtype, DType::F16);
  EXPECT_EQ(problem.batch, 2);
  EXPECT_EQ(problem.heads_q, 4);
  EXPECT_EQ(problem.heads_k, 2);
  EXPECT_EQ(problem.head_dim, 16);
  EXPECT_EQ(problem.head_dim_v, 32);
  EXPECT_EQ(problem.lens.seqlen_q, 5);
  EXPECT_EQ(problem.lens.seqlen_k, 7);
  EXPECT_EQ(problem.lens.q(1), 5);
  EXPECT_EQ(problem.lens.k(1), 7);
  EXPECT_EQ(problem.q.data, q.data());
  EXPECT_EQ(problem.q.batch_stride, 5 * 4 * 16);
  EXPECT_EQ(problem.q.row_stride, 4 * 16);
  EXPECT_EQ(problem.q.head_stride, 16);
  EXPECT_EQ(problem.k.row_stride, 2 * 16);
  EXPECT_EQ(problem.v.batch_stride, 7 * 2 * 32);
  EXPECT_EQ(problem.out.offset(1, 2, 3), 1 * 5 * 4 * 32 + 2 * 4 * 32 + 3 * 32);
  EXPECT_EQ(problem.lse.data, lse.data());
  EXPECT_EQ(problem.lse.offset(1, 3, 2), 1 * 20 + 2 * 5 + 3);
  EXPECT_EQ(problem.mask.window_left, -1);
  EXPECT_EQ(problem.mask.window_right, -1);
  EXPECT_EQ(problem.alibi_slopes, nullptr);
  EXPECT_EQ(problem.num_splits, 1);
}

TEST_F(FwdRules, LseIsOptionalInForward) {
  p.softmax_lse = {};
  ASSERT_TRUE(build().ok());
  EXPECT_FALSE(problem.lse.defined());
}

TEST_F(FwdRules, DefaultScaleIsInverseSqrtHeadDim) {
  ASSERT_TRUE(build().ok());
  EXPECT_FLOAT_EQ(problem.score.scale, 0.25f);  // 1 / sqrt(16)
  p.softmax_scale = 0.125f;
  p.softcap = 30.f;
  ASSERT_TRUE(build().ok());
  EXPECT_FLOAT_EQ(problem.score.scale, 0.125f);
  EXPECT_FLOAT_EQ(problem.score.softcap, 30.f);
}

TEST_F(FwdRules, CausalSetsWindowRightToZeroAndKeepsWindowLeft) {
  p.causal = true;
  p.window_left = 3;
  p.window_right = 5;
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.mask.window_left, 3);
  EXPECT_EQ(problem.mask.window_right, 0);
  p.causal = false;
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.mask.window_right, 5);
}

TEST_F(FwdRules, WindowsWiderThanTheSequenceAreKept) {
  p.window_left = 1000;
  p.window_right = 1 << 30;
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.mask.window_left, 1000);
  EXPECT_EQ(problem.mask.window_right, 1 << 30);
}

TEST_F(FwdRules, GqaMapsQueryHeadsToKeyHeads) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.kv_head(0), 0);
  EXPECT_EQ(problem.kv_head(1), 0);
  EXPECT_EQ(problem.kv_head(2), 1);
  EXPECT_EQ(problem.kv_head(3), 1);
  HostTensor k1(DType::F16, {2, 7, 1, 16}), v1(DType::F16, {2, 7, 1, 32});  // MQA
  p.k = k1.view();
  p.v = v1.view();
  ASSERT_TRUE(build().ok());
  for (int h = 0; h < 4; ++h) EXPECT_EQ(problem.kv_head(h), 0);
}

TEST_F(FwdRules, AlibiSlopesAndTheirBatchStride) {
  HostTensor per_head(DType::F32, {4}), per_batch(DType::F32, {2, 4});
  p.alibi_slopes = per_head.view();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.alibi_slopes, per_head.data());
  EXPECT_EQ(problem.alibi_batch_stride, 0);
  p.alibi_slopes = per_batch.view();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.alibi_batch_stride, 4);
  // A broadcast (expanded) batch dimension is fine: slopes are only read.
  p.alibi_slopes = TensorView::strided(per_head.data(), DType::F32, {2, 4}, {0, 1});
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.alibi_batch_stride, 0);
}

TEST_F(FwdRules, DropoutAndSplitsAreCopied) {
  p.dropout_p = 0.25f;
  p.dropout_seed = 42;
  p.dropout_offset = 7;
  p.num_splits = 0;
  ASSERT_TRUE(build().ok());
  EXPECT_FLOAT_EQ(problem.dropout_p, 0.25f);
  EXPECT_EQ(problem.dropout_seed, 42u);
  EXPECT_EQ(problem.dropout_offset, 7u);
  EXPECT_EQ(problem.num_splits, 0);
}

TEST_F(FwdRules, StridedInputsKeepTheirStrides) {
  // q as a slice of a padded buffer: rows 8 heads apart, sequences 6 rows apart.
  HostTensor padded(DType::F16, {2, 6, 8, 16});
  p.q = TensorView::strided(padded.data(), DType::F16, {2, 5, 4, 16}, {6 * 8 * 16, 8 * 16, 16, 1});
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.q.batch_stride, 6 * 8 * 16);
  EXPECT_EQ(problem.q.row_stride, 8 * 16);
}

TEST_F(FwdRules, NoProblemPointer) {
  EXPECT_INVALID(make_fwd_problem(p, nullptr), "problem", "must point to the problem");
}

// --- well-formed views -----------------------------------------------------------------------
TEST_F(FwdRules, NdimOutOfRange) {
  p.q.ndim = 6;
  EXPECT_INVALID(build(), "q", "ndim must be in [0, 5]");
  p.q = TensorView::contiguous(q.data(), DType::F16, {1, 2, 5, 4, 16, 1});  // six dims
  EXPECT_INVALID(build(), "q", "ndim must be in [0, 5]");
  p.q = TensorView::strided(q.data(), DType::F16, {2, 5, 4, 16}, {320, 64, 16});  // strides missing
  EXPECT_INVALID(build(), "q", "ndim must be in [0, 5]");
  p.q = q.view();
  p.softmax_lse.ndim = -3;  // optional arguments are checked too
  EXPECT_INVALID(build(), "softmax_lse", "ndim must be in [0, 5]");
}

TEST_F(FwdRules, UnknownDtype) {
  p.k.dtype = static_cast<DType>(42);
  EXPECT_INVALID(build(), "k", "dtype must be a flashattn::DType");
}

TEST_F(FwdRules, UnknownDeviceOrNegativeCudaIndex) {
  p.v.device = static_cast<DeviceType>(9);
  EXPECT_INVALID(build(), "v", "device must be");
  p.v = on_cuda(v.view(), fake_device_pointer(), -1);
  EXPECT_INVALID(build(), "v", "CUDA device index must be >= 0");
}

TEST_F(FwdRules, NegativeDimension) {
  p.v.shape[1] = -7;
  EXPECT_INVALID(build(), "v", "every dimension must be >= 0");
}

TEST_F(FwdRules, NegativeStride) {
  p.k.stride[1] = -32;
  EXPECT_INVALID(build(), "k", "strides must be >= 0");
}

TEST_F(FwdRules, SizesOverflowingInt64) {
  p.q.shape[0] = int64_t(1) << 40;
  p.q.shape[1] = int64_t(1) << 40;
  EXPECT_INVALID(build(), "q", "must fit in int64");
  p.q = q.view();
  p.q.stride[0] = int64_t(1) << 62;  // the span in bytes overflows
  EXPECT_INVALID(build(), "q", "must fit in int64");
}

TEST_F(FwdRules, SpanWrappingTheAddressSpace) {
  p.k.data = reinterpret_cast<void*>(std::numeric_limits<uintptr_t>::max() - 63);
  EXPECT_INVALID(build(), "k", "wrap around the address space");
}

// --- presence ----------------------------------------------------------------------------------
TEST_F(FwdRules, RequiredTensorsMissing) {
  for (auto [member, name] : {std::pair{&FwdParams::q, "q"}, std::pair{&FwdParams::k, "k"},
                              std::pair{&FwdParams::v, "v"}, std::pair{&FwdParams::out, "out"}}) {
    FwdParams saved = p;
    p.*member = TensorView{};
    EXPECT_INVALID(build(), name, "is required");
    p = saved;
  }
}

TEST_F(FwdRules, NullDataWithElements) {
  p.k.data = nullptr;
  EXPECT_INVALID(build(), "k", "data must be non-null");
}

TEST_F(FwdRules, EmptyBatchWithNullDataIsValid) {
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.softmax_lse}) {
    t->shape[0] = 0;
    t->data = nullptr;
  }
  EXPECT_OK(build());
  EXPECT_OK(fwd(p));  // returns without running anything
}

// --- dtypes ------------------------------------------------------------------------------------
TEST_F(FwdRules, InputDtypeNotFloat) {
  p.q.dtype = DType::I32;
  EXPECT_INVALID(build(), "q", "dtype must be float16, bfloat16, float32 or float8_e4m3fn");
}

TEST_F(FwdRules, KeyDtypeDiffersFromQuery) {
  p.k.dtype = DType::BF16;
  EXPECT_INVALID(build(), "k", "dtype must equal the dtype of 'q' (float16)");
  p.k.dtype = DType::F16;
  p.v.dtype = DType::F32;
  EXPECT_INVALID(build(), "v", "dtype must equal the dtype of 'q'");
}

TEST_F(FwdRules, OutputDtype) {
  HostTensor out32(DType::F32, {2, 5, 4, 32});
  p.out = out32.view();
  EXPECT_INVALID(build(), "out", "dtype must equal the inputs' dtype (float16)");
  EXPECT_OK(make_fwd_problem(p, &problem, {.allow_f32_outputs = true}));
  EXPECT_EQ(problem.out_dtype, DType::F32);
  p.out.dtype = DType::BF16;
  EXPECT_INVALID(make_fwd_problem(p, &problem, {.allow_f32_outputs = true}), "out", "dtype must equal");
}

TEST_F(FwdRules, LseMustBeFloat32) {
  p.softmax_lse.dtype = DType::F16;
  EXPECT_INVALID(build(), "softmax_lse", "dtype must be float32");
}

TEST_F(FwdRules, WorkspaceAllocatorNeedsBothFunctions) {
  p.workspace.allocate = workspace_allocate;
  EXPECT_INVALID(build(), "workspace", "allocate and release must be given together");
  p.workspace = {};
  p.workspace.release = workspace_release;
  EXPECT_INVALID(build(), "workspace", "release without allocate");
  p.workspace.allocate = workspace_allocate;
  EXPECT_OK(build());
}

TEST_F(FwdRules, AlibiMustBeFloat32) {
  HostTensor slopes(DType::F16, {4});
  p.alibi_slopes = slopes.view();
  EXPECT_INVALID(build(), "alibi_slopes", "dtype must be float32");
}

// --- shapes ------------------------------------------------------------------------------------
TEST_F(FwdRules, DenseNeedsFourDims) {
  p.q = TensorView::contiguous(q.data(), DType::F16, {10, 4, 16});
  EXPECT_INVALID(build(), "q", "ndim must be 4 (batch, seqlen_q, heads_q, head_dim)");
}

TEST_F(FwdRules, KeyBatchMismatch) {
  HostTensor k3(DType::F16, {3, 7, 2, 16});
  p.k = k3.view();
  EXPECT_INVALID(build(), "k", "dim 0 must equal the batch of q (2), got 3");
}

TEST_F(FwdRules, KeyHeadDimMismatch) {
  HostTensor k24(DType::F16, {2, 7, 2, 24});
  p.k = k24.view();
  EXPECT_INVALID(build(), "k", "dim 3 must equal the head_dim of q (16), got 24");
}

TEST_F(FwdRules, ValueSeqlenMismatch) {
  HostTensor v8(DType::F16, {2, 8, 2, 32});
  p.v = v8.view();
  EXPECT_INVALID(build(), "v", "dim 1 must equal the seqlen_k of k (7), got 8");
}

TEST_F(FwdRules, ValueHeadsMismatch) {
  HostTensor v4(DType::F16, {2, 7, 4, 32});
  p.v = v4.view();
  EXPECT_INVALID(build(), "v", "dim 2 must equal heads_k of k (2), got 4");
}

TEST_F(FwdRules, OutHeadDimMustBeValuesHeadDim) {
  HostTensor out16(DType::F16, {2, 5, 4, 16});
  p.out = out16.view();
  EXPECT_INVALID(build(), "out", "dim 3 must equal the head_dim_v of v (32), got 16");
}

TEST_F(FwdRules, OutSeqlenMismatch) {
  HostTensor out6(DType::F16, {2, 6, 4, 32});
  p.out = out6.view();
  EXPECT_INVALID(build(), "out", "dim 1 must equal the seqlen_q of q (5)");
}

TEST_F(FwdRules, LseShape) {
  HostTensor wrong(DType::F32, {2, 4, 6});
  p.softmax_lse = wrong.view();
  EXPECT_INVALID(build(), "softmax_lse", "dim 2 must equal the seqlen_q of q (5), got 6");
  HostTensor flat(DType::F32, {4, 10});
  p.softmax_lse = flat.view();
  EXPECT_INVALID(build(), "softmax_lse", "ndim must be 3 (batch, heads_q, seqlen_q)");
}

TEST_F(FwdRules, HeadDimNotMultipleOf8) {
  HostTensor q12(DType::F16, {2, 5, 4, 12}), k12(DType::F16, {2, 7, 2, 12});
  p.q = q12.view();
  p.k = k12.view();
  EXPECT_INVALID(build(), "q", "head_dim must be a multiple of 8 in [8, 256] (the Python layer pads");
  EXPECT_NE(build().message().find("got 12"), std::string::npos);
}

TEST_F(FwdRules, HeadDimTooLarge) {
  HostTensor q264(DType::F16, {2, 5, 4, 264}), k264(DType::F16, {2, 7, 2, 264});
  p.q = q264.view();
  p.k = k264.view();
  EXPECT_INVALID(build(), "q", "head_dim must be a multiple of 8 in [8, 256]");
}

TEST_F(FwdRules, HeadDimVTooSmall) {
  HostTensor v4(DType::F16, {2, 7, 2, 4}), out4(DType::F16, {2, 5, 4, 4});
  p.v = v4.view();
  p.out = out4.view();
  EXPECT_INVALID(build(), "v", "head_dim_v must be a multiple of 8 in [8, 256]");
}

TEST_F(FwdRules, HeadDimLimitsAreInclusive) {
  for (int64_t d : {8, 256}) {
    HostTensor qd(DType::F16, {2, 5, 4, d}), kd(DType::F16, {2, 7, 2, d}), vd(DType::F16, {2, 7, 2, d}),
        od(DType::F16, {2, 5, 4, d});
    p.q = qd.view();
    p.k = kd.view();
    p.v = vd.view();
    p.out = od.view();
    EXPECT_OK(build());
  }
}

TEST_F(FwdRules, HeadsKMustDivideHeadsQ) {
  HostTensor k3(DType::F16, {2, 7, 3, 16}), v3(DType::F16, {2, 7, 3, 32});
  p.k = k3.view();
  p.v = v3.view();
  EXPECT_INVALID(build(), "k", "heads_k must divide heads_q (4)");
}

TEST_F(FwdRules, ZeroHeads) {
  p.q.shape[2] = 0;
  EXPECT_INVALID(build(), "q", "heads_q must be > 0");
  p.q = q.view();
  p.k.shape[2] = 0;
  p.v.shape[2] = 0;
  EXPECT_INVALID(build(), "k", "heads_k must be > 0");
}

TEST_F(FwdRules, SeqlenBeyondInt32) {
  const int64_t huge = int64_t(1) << 31;  // views only: nothing is read
  p.k.shape[1] = huge;
  p.v.shape[1] = huge;
  EXPECT_INVALID(build(), "k", "every dimension must fit in int32");
}

TEST_F(FwdRules, AlibiShape) {
  HostTensor three(DType::F32, {3}), wrong_batch(DType::F32, {3, 4}), cube(DType::F32, {2, 4, 1});
  p.alibi_slopes = three.view();
  EXPECT_INVALID(build(), "alibi_slopes", "dim 0 must equal heads_q of q (4), got 3");
  p.alibi_slopes = wrong_batch.view();
  EXPECT_INVALID(build(), "alibi_slopes", "dim 0 must equal the batch (2), got 3");
  p.alibi_slopes = cube.view();
  EXPECT_INVALID(build(), "alibi_slopes", "ndim must be 1 (heads_q) or 2 (batch, heads_q)");
}

TEST_F(FwdRules, SequsedShapeAndContents) {
  HostTensor three = int_tensor({1, 2, 3});
  p.seqused_k = three.view();
  EXPECT_INVALID(build(), "seqused_k", "dim 0 must equal the batch (2), got 3");
  HostTensor used = int_tensor({3, 7});
  p.seqused_k = used.view();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.lens.k(0), 3);
  EXPECT_EQ(problem.lens.k(1), 7);
  HostTensor too_many = int_tensor({3, 8}), negative = int_tensor({-1, 2});
  p.seqused_k = too_many.view();
  EXPECT_INVALID(build(), "seqused_k", "entries must be in [0, the key length of their sequence]");
  p.seqused_k = negative.view();
  EXPECT_INVALID(build(), "seqused_k", "seqused_k[0] = -1");
}

// --- layout and placement ------------------------------------------------------------------------
TEST_F(FwdRules, LastDimNotContiguous) {
  p.q.stride[3] = 2;
  EXPECT_INVALID(build(), "q", "the last dimension must be contiguous (stride 1)");
  p.q = q.view();
  p.softmax_lse.stride[2] = 2;
  EXPECT_INVALID(build(), "softmax_lse", "the last dimension must be contiguous");
}

TEST_F(FwdRules, HostDataMisaligned) {
  p.q.data = static_cast<char*>(q.data()) + 1;
  EXPECT_INVALID(build(), "q", "aligned to its element size (2 bytes)");
  p.q = q.view();
  p.softmax_lse.data = static_cast<char*>(lse.data()) + 2;
  EXPECT_INVALID(build(), "softmax_lse", "aligned to its element size (4 bytes)");
}

TEST_F(FwdRules, TensorsOnDifferentDevices) {
  p.k = on_cuda(k.view(), fake_device_pointer());
  EXPECT_INVALID(build(), "k", "must be on the device of 'q' (cpu), got cuda:0");
}

// --- options -----------------------------------------------------------------------------------
TEST_F(FwdRules, WindowBelowMinusOne) {
  p.window_left = -2;
  EXPECT_INVALID(build(), "window_left", "must be >= -1");
  p.window_left = -1;
  p.window_right = -5;
  EXPECT_INVALID(build(), "window_right", "must be >= -1 (-1 = unbounded), got -5");
}

TEST_F(FwdRules, SoftcapNegativeOrNotFinite) {
  for (float cap : {-1.f, std::nanf(""), INFINITY}) {
    p.softcap = cap;
    EXPECT_INVALID(build(), "softcap", "must be finite and >= 0");
  }
}

TEST_F(FwdRules, SoftmaxScaleNotFinite) {
  for (float scale : {std::nanf(""), -INFINITY}) {
    p.softmax_scale = scale;
    EXPECT_INVALID(build(), "softmax_scale", "must be finite");
  }
}

TEST_F(FwdRules, DropoutOutOfRange) {
  for (float drop : {1.f, -0.1f, std::nanf(""), INFINITY}) {
    p.dropout_p = drop;
    EXPECT_INVALID(build(), "dropout_p", "must be in [0, 1)");
  }
  p.dropout_p = 0.999f;
  EXPECT_OK(build());
}

TEST_F(FwdRules, NumSplitsOutOfRange) {
  for (int splits : {-1, 257}) {
    p.num_splits = splits;
    EXPECT_INVALID(build(), "num_splits", "must be in [0, 256]");
  }
  p.num_splits = 256;
  EXPECT_OK(build());
}

TEST_F(FwdRules, UnknownBackend) {
  p.backend = static_cast<Backend>(17);
  EXPECT_INVALID(build(), "backend", "must be Backend::Auto, Cpu, Fa2 or Fa3");
}

// --- overlap -----------------------------------------------------------------------------------
TEST_F(FwdRules, OutputOverlapsInput) {
  HostTensor big(DType::F16, {2, 7, 4, 32});
  p.v = TensorView::contiguous(big.data(), DType::F16, {2, 7, 2, 32});
  p.out = TensorView::contiguous(static_cast<uint16_t*>(big.data()) + 64, DType::F16, {2, 5, 4, 32});
  EXPECT_INVALID(build(), "out", "must not overlap the memory of 'v'");
}

TEST_F(FwdRules, LseOverlapsOut) {
  p.softmax_lse.data = out.data();
  EXPECT_INVALID(build(), "softmax_lse", "must not overlap the memory of 'out'");
}

// A host tensor's device_index means nothing: it neither moves the tensor to another device
// (the message read "must be on the device of 'q' (cpu), got cpu") nor exempts it from the
// overlap rules. (Found writing the fuzz tests' placement mutations.)
TEST_F(FwdRules, HostDeviceIndexIsIgnored) {
  p.k.device_index = 3;
  p.softmax_lse.device_index = 7;
  EXPECT_OK(build());
  p.softmax_lse.data = out.data();
  EXPECT_INVALID(build(), "softmax_lse", "must not overlap the memory of 'out'");
}

TEST_F(FwdRules, OutputAliasingItself) {
  p.out.stride[1] = 0;
  EXPECT_INVALID(build(), "out", "elements must not alias each other");
}

TEST_F(FwdRules, PackedQkvInputsAndInterleavedOutputAreFine) {
  // q, k, v and out as slots 0-3 of one (batch, seq, 4, heads, d) buffer: the byte ranges
  // intersect, yet no element is shared.
  HostTensor packed(DType::F16, {2, 5, 4, 4, 16});
  auto* base = static_cast<uint16_t*>(packed.data());
  const std::initializer_list<int64_t> strides = {5 * 4 * 64, 4 * 64, 16, 1};
  p.q = TensorView::strided(base, DType::F16, {2, 5, 4, 16}, strides);
  p.k = TensorView::strided(base + 64, DType::F16, {2, 5, 4, 16}, strides);
  p.v = TensorView::strided(base + 128, DType::F16, {2, 5, 4, 16}, strides);
  p.out = TensorView::strided(base + 192, DType::F16, {2, 5, 4, 16}, strides);
  p.softmax_lse = {};
  EXPECT_OK(build());
  // The same slot as q does overlap.
  p.out = TensorView::strided(base, DType::F16, {2, 5, 4, 16}, strides);
  EXPECT_INVALID(build(), "out", "must not overlap the memory of 'q'");
  // So does a slot shifted by half a head.
  p.out = TensorView::strided(base + 192 - 8, DType::F16, {2, 5, 4, 16}, strides);
  EXPECT_INVALID(build(), "out", "must not overlap the memory of 'v'");
}

// ---------------------------------------------------------------------------------------------
// Forward, varlen: 3 sequences, q lengths {2, 0, 3}, k lengths {4, 1, 2}.
// ---------------------------------------------------------------------------------------------
class VarlenRules : public ::testing::Test {
 protected:
  VarlenRules() {
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.cu_seqlens_q = cu_q.view();
    p.cu_seqlens_k = cu_k.view();
  }
  Status build() { return make_fwd_problem(p, &problem); }
  void set_cu_q(std::vector<int32_t> values) { std::memcpy(cu_q.data(), values.data(), 16); }

  HostTensor q{DType::BF16, {5, 4, 16}}, k{DType::BF16, {7, 2, 16}}, v{DType::BF16, {7, 2, 16}};
  HostTensor out{DType::BF16, {5, 4, 16}}, lse{DType::F32, {4, 5}};
  HostTensor cu_q = int_tensor({0, 2, 2, 5}), cu_k = int_tensor({0, 4, 5, 7});
  FwdParams p;
  AttnProblem problem;
};

TEST_F(VarlenRules, ValidCallDerivesMaxSeqlens) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.batch, 3);
  EXPECT_EQ(problem.lens.seqlen_q, 3);  // derived: the longest sequence
  EXPECT_EQ(problem.lens.seqlen_k, 4);
  EXPECT_EQ(problem.lens.q(1), 0);
  EXPECT_EQ(problem.lens.k(2), 2);
  EXPECT_EQ(problem.q.cu_seqlens, cu_q.data());
  EXPECT_EQ(problem.k.cu_seqlens, cu_k.data());
  EXPECT_EQ(problem.v.cu_seqlens, cu_k.data());
  EXPECT_EQ(problem.out.cu_seqlens, cu_q.data());
  EXPECT_EQ(problem.q.offset(2, 1, 3), (2 + 1) * 64 + 3 * 16);
  p.max_seqlen_q = 10;
  p.max_seqlen_k = 4;
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.lens.seqlen_q, 10);
  EXPECT_EQ(problem.lens.seqlen_k, 4);
}

TEST_F(VarlenRules, LseViewIsHeadsByTotal) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.lse.cu_seqlens, cu_q.data());
  EXPECT_EQ(problem.lse.head_stride, 5);
  EXPECT_EQ(problem.lse.row_stride, 1);
  // Sequence 2 starts at row 2: (b=2, row=1, h=3) is lse[3][3].
  EXPECT_EQ(problem.lse.offset(2, 1, 3), 3 * 5 + 3);
  HostTensor dense_lse(DType::F32, {3, 4, 3});
  p.softmax_lse = dense_lse.view();
  EXPECT_INVALID(build(), "softmax_lse", "ndim must be 2 (heads_q, total_q)");
}

TEST_F(VarlenRules, VarlenNeedsThreeDims) {
  p.q = TensorView::contiguous(q.data(), DType::BF16, {1, 5, 4, 16});
  EXPECT_INVALID(build(), "q", "ndim must be 3 (total_q, heads_q, head_dim) with cu_seqlens");
}

TEST_F(VarlenRules, CuSeqlensComeInPairs) {
  p.cu_seqlens_q = {};
  EXPECT_INVALID(build(), "cu_seqlens_q", "must be given together with 'cu_seqlens_k'");
  p.cu_seqlens_q = cu_q.view();
  p.cu_seqlens_k = {};
  EXPECT_INVALID(build(), "cu_seqlens_k", "must be given together with 'cu_seqlens_q'");
}

TEST_F(VarlenRules, CuSeqlensDtype) {
  p.cu_seqlens_q.dtype = DType::F32;
  EXPECT_INVALID(build(), "cu_seqlens_q", "dtype must be int32, got float32");
}

TEST_F(VarlenRules, CuSeqlensNdimAndLength) {
  p.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::I32, {2, 2});
  EXPECT_INVALID(build(), "cu_seqlens_q", "ndim must be 1 (batch + 1)");
  p.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::I32, {0});
  EXPECT_INVALID(build(), "cu_seqlens_q", "must hold batch + 1 >= 1 entries");
  p.cu_seqlens_q = cu_q.view();
  p.cu_seqlens_k = TensorView::contiguous(cu_k.data(), DType::I32, {3});
  EXPECT_INVALID(build(), "cu_seqlens_k", "dim 0 must equal the length of cu_seqlens_q (4), got 3");
}

TEST_F(VarlenRules, CuSeqlensMustBeContiguous) {
  HostTensor spread = int_tensor({0, 9, 2, 9, 2, 9, 5, 9});
  p.cu_seqlens_q = TensorView::strided(spread.data(), DType::I32, {4}, {2});
  EXPECT_INVALID(build(), "cu_seqlens_q", "must be contiguous");
}

TEST_F(VarlenRules, CuSeqlensMustStartAtZero) {
  set_cu_q({1, 2, 2, 5});
  EXPECT_INVALID(build(), "cu_seqlens_q", "cu_seqlens_q[0] must be 0, got 1");
}

TEST_F(VarlenRules, CuSeqlensMustBeNonDecreasing) {
  set_cu_q({0, 3, 2, 5});
  EXPECT_INVALID(build(), "cu_seqlens_q", "must be non-decreasing, got cu_seqlens_q[2] = 2 < cu_seqlens_q[1] = 3");
}

TEST_F(VarlenRules, CuSeqlensMustFitTheRows) {
  set_cu_q({0, 2, 2, 6});
  EXPECT_INVALID(build(), "cu_seqlens_q", "the last entry must be <= the rows of q (total_q) (5)");
  set_cu_q({0, 2, 2, 4});  // fewer rows used than given: fine
  EXPECT_OK(build());
  cu_k.as<int32_t>()[3] = 8;
  EXPECT_INVALID(build(), "cu_seqlens_k", "the last entry must be <= the rows of k (total_k) (7)");
}

TEST_F(VarlenRules, SequsedAgainstVarlenKeyLengths) {
  HostTensor used = int_tensor({4, 1, 2});
  p.seqused_k = used.view();
  EXPECT_OK(build());
  used.as<int32_t>()[1] = 2;  // sequence 1 has one key
  EXPECT_INVALID(build(), "seqused_k", "sequence 1 has 1 keys");
}

TEST_F(VarlenRules, MaxSeqlenBounds) {
  p.max_seqlen_q = 2;
  EXPECT_INVALID(build(), "max_seqlen_q", "must be >= the longest sequence (3), got 2");
  p.max_seqlen_q = 0;
  p.max_seqlen_k = -1;
  EXPECT_INVALID(build(), "max_seqlen_k", "must be >= 0");
  // With seqused_k the keys actually used are the lengths that count.
  HostTensor used = int_tensor({1, 1, 2});
  p.seqused_k = used.view();
  p.max_seqlen_k = 2;
  EXPECT_OK(build());
  EXPECT_EQ(problem.lens.seqlen_k, 2);
}

TEST_F(VarlenRules, DeviceCuSeqlensNeedMaxSeqlen) {
  void* base = fake_device_pointer();
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.softmax_lse, &p.cu_seqlens_q, &p.cu_seqlens_k}) {
    *t = on_cuda(*t, base);
    base = static_cast<char*>(base) + 4096;
  }
  EXPECT_INVALID(build(), "max_seqlen_q", "must be given (> 0) when 'cu_seqlens_q' is a CUDA tensor");
  p.max_seqlen_q = 3;
  EXPECT_INVALID(build(), "max_seqlen_k", "must be given (> 0)");
  p.max_seqlen_k = 4;
  // Contents are not read on the host (the pointers are fake): the call validates.
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.lens.seqlen_q, 3);
}

// Varlen queries over a paged k/v: 5 pages of 2 slots, 2 pages per sequence (capacity 4).
class PagedVarlenRules : public VarlenRules {
 protected:
  PagedVarlenRules() {
    p.k = k_pages.view();
    p.v = v_pages.view();
    p.block_table = table.view();
  }
  HostTensor k_pages{DType::BF16, {5, 2, 2, 16}}, v_pages{DType::BF16, {5, 2, 2, 16}};
  HostTensor table = [] {
    HostTensor t(DType::I32, {3, 2});
    const int32_t pages[] = {4, 1, 0, -1, 2, -1};  // sequence 1 (1 key) and 2 (2 keys): one page
    std::memcpy(t.data(), pages, sizeof(pages));
    return t;
  }();
};

TEST_F(PagedVarlenRules, RowsGoThroughTheTable) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.k.block_table, table.data());
  EXPECT_EQ(problem.k.cu_seqlens, nullptr);
  EXPECT_EQ(problem.v.page_size, 2);
  EXPECT_EQ(problem.lens.k(0), 4);
  EXPECT_EQ(problem.lens.total_k, 0);
  // Sequence 0, key 3: page 1 -> block 1, slot 1 (page stride 64, row stride 32, head 16).
  EXPECT_EQ(problem.k.offset(0, 3, 1), 1 * 64 + 1 * 32 + 16);
  EXPECT_EQ(problem.q.cu_seqlens, cu_q.data());  // queries stay varlen
}

TEST_F(PagedVarlenRules, NeedsVarlen) {
  HostTensor q4(DType::BF16, {3, 2, 4, 16}), out4(DType::BF16, {3, 2, 4, 16}), lse3(DType::F32, {3, 4, 2});
  p.q = q4.view();
  p.out = out4.view();
  p.softmax_lse = lse3.view();
  p.cu_seqlens_q = {};
  p.cu_seqlens_k = {};
  EXPECT_INVALID(build(), "block_table", "a paged k/v in fwd needs the varlen layout");
}

TEST_F(PagedVarlenRules, PagedShapes) {
  p.k = TensorView::contiguous(k_pages.data(), DType::BF16, {10, 2, 16});
  EXPECT_INVALID(build(), "k", "ndim must be 4 (num_blocks, page_size, heads_k, head_dim) with block_table");
  p.k = k_pages.view();
  HostTensor v_short(DType::BF16, {4, 2, 2, 16});
  p.v = v_short.view();
  EXPECT_INVALID(build(), "v", "dim 0 must equal dim 0 of k (5), got 4");
  p.v = v_pages.view();
  HostTensor two_rows(DType::I32, {2, 2});
  p.block_table = two_rows.view();
  EXPECT_INVALID(build(), "block_table", "dim 0 must equal the batch (len(cu_seqlens_q) - 1) (3), got 2");
  p.block_table = table.view();
  p.block_table.dtype = DType::F32;
  EXPECT_INVALID(build(), "block_table", "dtype must be int32");
}

TEST_F(PagedVarlenRules, SequencesFitTheirTableRow) {
  cu_k.as<int32_t>()[1] = 5;  // sequence 0: 5 keys, a row holds 4
  EXPECT_INVALID(build(), "cu_seqlens_k", "no sequence may have more keys than a block_table row holds");
  cu_k.as<int32_t>()[1] = 4;
  p.max_seqlen_k = 5;
  EXPECT_INVALID(build(), "max_seqlen_k", "must be <= what a block_table row holds");
}

TEST_F(PagedVarlenRules, PagesInUseNameBlocks) {
  table.as<int32_t>()[1] = 5;  // sequence 0's second page: past the 5 blocks
  EXPECT_INVALID(build(), "block_table", "entries for the pages in use must be in [0, num_blocks of k (5))");
  table.as<int32_t>()[1] = 3;
  HostTensor used = int_tensor({2, 1, 2});  // seqused_k: sequence 0 reads only its first page
  p.seqused_k = used.view();
  table.as<int32_t>()[1] = -1;
  EXPECT_OK(build());
}

// ---------------------------------------------------------------------------------------------
// CUDA views: alignment rules and backend choice (fake pointers, never dereferenced).
// ---------------------------------------------------------------------------------------------
class CudaViews : public ::testing::Test {
 protected:
  CudaViews() {
    p.q = TensorView::contiguous(fake_device_pointer(0x0000), DType::F16, {2, 5, 4, 16}, DeviceType::Cuda);
    p.k = TensorView::contiguous(fake_device_pointer(0x1000), DType::F16, {2, 7, 2, 16}, DeviceType::Cuda);
    p.v = TensorView::contiguous(fake_device_pointer(0x2000), DType::F16, {2, 7, 2, 16}, DeviceType::Cuda);
    p.out = TensorView::contiguous(fake_device_pointer(0x3000), DType::F16, {2, 5, 4, 16}, DeviceType::Cuda);
    p.softmax_lse = TensorView::contiguous(fake_device_pointer(0x4004), DType::F32, {2, 4, 5}, DeviceType::Cuda);
  }
  FwdParams p;
  AttnProblem problem;
};

TEST_F(CudaViews, ValidateWithoutReadingMemory) { EXPECT_OK(make_fwd_problem(p, &problem)); }

TEST_F(CudaViews, DataMustBe16ByteAligned) {
  p.k.data = fake_device_pointer(0x1008);
  EXPECT_INVALID(make_fwd_problem(p, &problem), "k", "data of a CUDA tensor must be 16-byte aligned");
}

TEST_F(CudaViews, OuterStridesMustBe16ByteMultiples) {
  // Rows 68 elements (136 bytes) apart.
  p.q = TensorView::strided(fake_device_pointer(0x8000), DType::F16, {2, 5, 4, 16}, {5 * 68, 68, 16, 1},
                            DeviceType::Cuda);
  EXPECT_INVALID(make_fwd_problem(p, &problem), "q", "every stride but the last of a CUDA tensor must be a multiple of 16 bytes");
}

TEST_F(CudaViews, DifferentDeviceIndex) {
  p.v.device_index = 1;
  EXPECT_INVALID(make_fwd_problem(p, &problem), "v", "must be on the device of 'q' (cuda:0), got cuda:1");
}

TEST_F(CudaViews, CpuBackendNeedsHostTensors) {
  p.backend = Backend::Cpu;
  EXPECT_INVALID(fwd(p), "backend", "the CPU backend needs host tensors");
}

TEST_F(CudaViews, GpuBackendsAreNotInThisBuildYet) {
  const DeviceInfo info = device_info(0);
  for (Backend b : {Backend::Auto, Backend::Fa2, Backend::Fa3}) {
    // With a GPU present, Auto and Fa2 would launch real kernels on these fake pointers.
    if (info.device >= 0 && b != Backend::Fa3) continue;
    p.backend = b;
    const Status st = fwd(p);
    EXPECT_FALSE(st.ok());
    if (!info.cuda_built) {
      EXPECT_TRUE(IsError(st, ErrorCode::Unsupported, "backend", "not in this build")) << backend_name(b);
    } else if (info.device < 0) {
      EXPECT_INVALID(st, "q", "must be on a visible CUDA device");
    } else {
      EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
    }
  }
}

TEST(BackendChoice, GpuBackendsNeedCudaTensors) {
  HostTensor q(DType::F16, {1, 3, 2, 16}), k(DType::F16, {1, 3, 2, 16}), v(DType::F16, {1, 3, 2, 16}),
      out(DType::F16, {1, 3, 2, 16});
  FwdParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  for (Backend b : {Backend::Fa2, Backend::Fa3}) {
    p.backend = b;
    EXPECT_INVALID(fwd(p), "backend", "needs CUDA tensors");
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------
class BwdRules : public ::testing::Test {
 protected:
  BwdRules() {
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.dout = dout.view();
    p.softmax_lse = lse.view();
    p.dq = dq.view();
    p.dk = dk.view();
    p.dv = dv.view();
  }
  Status build(api::ProblemOptions options = {}) { return make_bwd_problem(p, &problem, options); }

  HostTensor q{DType::BF16, {2, 5, 4, 16}}, k{DType::BF16, {2, 7, 2, 16}}, v{DType::BF16, {2, 7, 2, 16}};
  HostTensor out{DType::BF16, {2, 5, 4, 16}}, dout{DType::BF16, {2, 5, 4, 16}}, lse{DType::F32, {2, 4, 5}};
  HostTensor dq{DType::BF16, {2, 5, 4, 16}}, dk{DType::BF16, {2, 7, 2, 16}}, dv{DType::BF16, {2, 7, 2, 16}};
  BwdParams p;
  BwdProblem problem;
};

TEST_F(BwdRules, ValidCallPasses) {
  p.deterministic = true;
  p.causal = true;
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.fwd.batch, 2);
  EXPECT_EQ(problem.fwd.mask.window_right, 0);
  EXPECT_EQ(problem.dq.data, dq.data());
  EXPECT_EQ(problem.dk.row_stride, 2 * 16);
  EXPECT_EQ(problem.dv.batch_stride, 7 * 2 * 16);
  EXPECT_EQ(problem.dout_dtype, DType::BF16);
  EXPECT_EQ(problem.fwd.out_dtype, DType::BF16);
  EXPECT_TRUE(problem.deterministic);
  EXPECT_TRUE(problem.fwd.lse.defined());
}

TEST_F(BwdRules, WorkspaceAllocatorNeedsBothFunctions) {
  p.workspace.release = workspace_release;
  EXPECT_INVALID(build(), "workspace", "allocate and release must be given together");
}

TEST_F(BwdRules, LseIsRequired) {
  p.softmax_lse = {};
  EXPECT_INVALID(build(), "softmax_lse", "is required");
}

TEST_F(BwdRules, GradientsAreRequired) {
  for (auto [member, name] : {std::pair{&BwdParams::dout, "dout"}, std::pair{&BwdParams::dq, "dq"},
                              std::pair{&BwdParams::dk, "dk"}, std::pair{&BwdParams::dv, "dv"}}) {
    BwdParams saved = p;
    p.*member = TensorView{};
    EXPECT_INVALID(build(), name, "is required");
    p = saved;
  }
}

TEST_F(BwdRules, GradientShapes) {
  HostTensor wrong(DType::BF16, {2, 6, 4, 16});
  p.dq = wrong.view();
  EXPECT_INVALID(build(), "dq", "shape must equal the shape of 'q' [2, 5, 4, 16], got [2, 6, 4, 16]");
  p.dq = dq.view();
  p.dout = wrong.view();
  EXPECT_INVALID(build(), "dout", "shape must equal the shape of 'out'");
  p.dout = dout.view();
  p.dk = q.view();
  EXPECT_INVALID(build(), "dk", "shape must equal the shape of 'k'");
}

TEST_F(BwdRules, GradientDtypes) {
  p.dq.dtype = DType::F16;
  EXPECT_INVALID(build(), "dq", "dtype must equal the inputs' dtype (bfloat16)");
  // float32 gradients for the reference, all three alike.
  HostTensor dq32(DType::F32, {2, 5, 4, 16}), dk32(DType::F32, {2, 7, 2, 16}), dv32(DType::F32, {2, 7, 2, 16});
  p.dq = dq32.view();
  p.dk = dk32.view();
  p.dv = dv32.view();
  EXPECT_INVALID(build(), "dq", "dtype must equal");
  ASSERT_TRUE(build({.allow_f32_outputs = true}).ok());
  EXPECT_EQ(problem.fwd.out_dtype, DType::F32);
  p.dk = dk.view();
  EXPECT_INVALID(build({.allow_f32_outputs = true}), "dk", "dtype must equal the dtype of 'dq' (float32)");
}

TEST_F(BwdRules, DoutDtype) {
  p.dout.dtype = DType::F16;
  EXPECT_INVALID(build(), "dout", "dtype must equal the inputs' dtype");
}

TEST_F(BwdRules, GradientOverlapsInput) {
  p.dq = q.view();
  EXPECT_INVALID(build(), "dq", "must not overlap the memory of 'q'");
}

TEST_F(BwdRules, GradientsOverlapEachOther) {
  p.dv = dk.view();
  EXPECT_INVALID(build(), "dv", "must not overlap the memory of 'dk'");
}

TEST_F(BwdRules, PackedDqkvIsFine) {
  // dq, dk, dv as interleaved slices of one (batch, seq, 3, heads, d) gradient buffer.
  HostTensor qkv_q(DType::BF16, {2, 7, 4, 16}), qkv_k(DType::BF16, {2, 7, 4, 16}), qkv_v(DType::BF16, {2, 7, 4, 16});
  HostTensor o(DType::BF16, {2, 7, 4, 16}), dO(DType::BF16, {2, 7, 4, 16}), l(DType::F32, {2, 4, 7});
  HostTensor dqkv(DType::BF16, {2, 7, 3, 4, 16});
  p.q = qkv_q.view();
  p.k = qkv_k.view();
  p.v = qkv_v.view();
  p.out = o.view();
  p.dout = dO.view();
  p.softmax_lse = l.view();
  auto* base = static_cast<uint16_t*>(dqkv.data());
  const std::initializer_list<int64_t> strides = {7 * 3 * 64, 3 * 64, 16, 1};
  p.dq = TensorView::strided(base, DType::BF16, {2, 7, 4, 16}, strides);
  p.dk = TensorView::strided(base + 64, DType::BF16, {2, 7, 4, 16}, strides);
  p.dv = TensorView::strided(base + 128, DType::BF16, {2, 7, 4, 16}, strides);
  EXPECT_OK(build());
  // Shifted by one head instead of one slot: dk's heads 0-2 are dq's heads 1-3.
  p.dk = TensorView::strided(base + 16, DType::BF16, {2, 7, 4, 16}, strides);
  EXPECT_INVALID(build(), "dk", "must not overlap the memory of 'dq'");
}

TEST_F(BwdRules, EmptyBackwardWithKeysStillValidates) {
  // No queries, seven keys: dk and dv must still be written (zeros), so this is not "empty".
  for (TensorView* t : {&p.q, &p.out, &p.dout, &p.dq}) t->shape[1] = 0;
  p.softmax_lse.shape[2] = 0;
  EXPECT_OK(build());
}

// ---------------------------------------------------------------------------------------------
// KV cache: batch 2, one query, heads 4/2, d 16; dense cache (3 rows x 10 slots) or paged
// (6 pages of 4 slots, 3 pages per sequence); two appended keys.
// ---------------------------------------------------------------------------------------------
class KvCacheRules : public ::testing::Test {
 protected:
  KvCacheRules() {
    p.q = q.view();
    p.k_cache = k_cache.view();
    p.v_cache = v_cache.view();
    p.k_new = k_new.view();
    p.v_new = v_new.view();
    p.cache_seqlens = cache_seqlens.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
  }
  Status build() { return make_kvcache_problem(p, &problem); }
  void use_paged_cache() {
    p.k_cache = k_pages.view();
    p.v_cache = v_pages.view();
    p.block_table = block_table.view();
  }
  void use_rotary() {
    p.rotary_cos = cos.view();
    p.rotary_sin = sin.view();
  }

  HostTensor q{DType::F16, {2, 1, 4, 16}};
  HostTensor k_cache{DType::F16, {3, 10, 2, 16}}, v_cache{DType::F16, {3, 10, 2, 16}};
  HostTensor k_pages{DType::F16, {6, 4, 2, 16}}, v_pages{DType::F16, {6, 4, 2, 16}};
  HostTensor block_table = [] {
    HostTensor t(DType::I32, {2, 3});
    const int32_t pages[] = {5, 0, 3, 1, 2, 4};
    std::memcpy(t.data(), pages, sizeof(pages));
    return t;
  }();
  HostTensor k_new{DType::F16, {2, 2, 2, 16}}, v_new{DType::F16, {2, 2, 2, 16}};
  HostTensor cache_seqlens = int_tensor({3, 8});
  HostTensor cos{DType::F16, {12, 4}}, sin{DType::F16, {12, 4}};  // rotary_dim 8
  HostTensor out{DType::F16, {2, 1, 4, 16}}, lse{DType::F32, {2, 4, 1}};
  KvCacheParams p;
  KvCacheProblem problem;
};

TEST_F(KvCacheRules, WorkspaceAllocatorNeedsBothFunctions) {
  p.workspace.allocate = workspace_allocate;
  EXPECT_INVALID(build(), "workspace", "allocate without release");
}

TEST_F(KvCacheRules, ValidDenseCache) {
  ASSERT_TRUE(build().ok());
  const AttnProblem& a = problem.attn;
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.lens.cache_seqlens, cache_seqlens.data());
  EXPECT_EQ(a.lens.seqlen_k_added, 2);
  EXPECT_EQ(a.lens.seqlen_k, 10);
  EXPECT_EQ(a.lens.k(0), 5);
  EXPECT_EQ(a.lens.k(1), 10);
  EXPECT_EQ(a.k.data, k_cache.data());
  EXPECT_EQ(a.k.batch_stride, 10 * 2 * 16);
  EXPECT_EQ(a.k.block_table, nullptr);
  EXPECT_EQ(problem.k_new.data, k_new.data());
  EXPECT_EQ(problem.seqlen_new, 2);
  EXPECT_EQ(problem.rotary.rotary_dim, 0);
  EXPECT_FALSE(problem.rotary_q_per_row);
  EXPECT_EQ(a.num_splits, 0);
}

TEST_F(KvCacheRules, WholeCacheWithoutCacheSeqlens) {
  p.k_new = {};
  p.v_new = {};
  p.cache_seqlens = {};
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.lens.cache_seqlens, nullptr);
  EXPECT_EQ(problem.attn.lens.seqlen_k, 10);
  EXPECT_EQ(problem.attn.lens.k(1), 10);
  EXPECT_EQ(problem.k_new.data, nullptr);
  use_paged_cache();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.lens.seqlen_k, 12);  // 3 pages of 4
}

TEST_F(KvCacheRules, PagedRowsLandOnTheRightPage) {
  use_paged_cache();
  ASSERT_TRUE(build().ok());
  const RowsView& k = problem.attn.k;
  EXPECT_EQ(k.block_table, block_table.data());
  EXPECT_EQ(k.block_table_stride, 3);
  EXPECT_EQ(k.page_size, 4);
  // Page stride 4*2*16 = 128, row stride 32, head stride 16.
  // Sequence 1, key 9: page 9/4 = 2 of row 1 -> block 4, slot 1.
  EXPECT_EQ(k.offset(1, 9, 1), 4 * 128 + 1 * 32 + 1 * 16);
  // Sequence 0, key 5: page 1 of row 0 -> block 0, slot 1.
  EXPECT_EQ(k.offset(0, 5, 0), 0 * 128 + 1 * 32);
  // Sequence 0, key 3: page 0 -> block 5, slot 3.
  EXPECT_EQ(problem.attn.v.offset(0, 3, 1), 5 * 128 + 3 * 32 + 16);
  EXPECT_EQ(problem.attn.lens.seqlen_k, 12);
}

TEST_F(KvCacheRules, QueryRequiredAndCacheRank) {
  p.q = {};
  EXPECT_INVALID(build(), "q", "is required");
  p.q = q.view();
  p.k_cache = TensorView::contiguous(k_cache.data(), DType::F16, {30, 2, 16});
  EXPECT_INVALID(build(), "k_cache", "ndim must be 4 (batch_cache, seqlen_cache, heads_k, head_dim)");
}

TEST_F(KvCacheRules, ValueCacheShape) {
  p.v_cache.shape[1] = 9;
  EXPECT_INVALID(build(), "v_cache", "dim 1 must equal dim 1 of k_cache (10), got 9");
}

TEST_F(KvCacheRules, CacheDtype) {
  p.k_cache.dtype = DType::BF16;
  EXPECT_INVALID(build(), "k_cache", "dtype must equal the dtype of 'q'");
}

TEST_F(KvCacheRules, GqaAgainstTheCache) {
  HostTensor k3(DType::F16, {3, 10, 3, 16}), v3(DType::F16, {3, 10, 3, 16});
  p.k_cache = k3.view();
  p.v_cache = v3.view();
  p.k_new = {};
  p.v_new = {};
  EXPECT_INVALID(build(), "k_cache", "heads_k must divide heads_q (4)");
}

TEST_F(KvCacheRules, NewKeysComeWithNewValues) {
  p.v_new = {};
  EXPECT_INVALID(build(), "v_new", "must be given together with 'k_new'");
}

TEST_F(KvCacheRules, NewKeysNeedCacheSeqlens) {
  p.cache_seqlens = {};
  EXPECT_INVALID(build(), "cache_seqlens", "is required when 'k_new' is given");
}

TEST_F(KvCacheRules, NewKeysShape) {
  HostTensor wrong_heads(DType::F16, {2, 2, 4, 16});
  p.k_new = wrong_heads.view();
  EXPECT_INVALID(build(), "k_new", "dim 2 must equal heads_k of k_cache (2), got 4");
  p.k_new = k_new.view();
  HostTensor wrong_len(DType::F16, {2, 3, 2, 16});
  p.v_new = wrong_len.view();
  EXPECT_INVALID(build(), "v_new", "dim 1 must equal the seqlen_new of k_new (2), got 3");
}

TEST_F(KvCacheRules, CacheSeqlensDtypeAndShape) {
  p.cache_seqlens.dtype = DType::F32;
  EXPECT_INVALID(build(), "cache_seqlens", "dtype must be int32");
  HostTensor three = int_tensor({1, 2, 3});
  p.cache_seqlens = three.view();
  EXPECT_INVALID(build(), "cache_seqlens", "dim 0 must equal the batch of q (2), got 3");
}

TEST_F(KvCacheRules, CacheSeqlensContents) {
  cache_seqlens.as<int32_t>()[0] = -1;
  EXPECT_INVALID(build(), "cache_seqlens", "entries must be >= 0, got cache_seqlens[0] = -1");
  cache_seqlens.as<int32_t>()[0] = 9;  // 9 + 2 new > 10 slots
  EXPECT_INVALID(build(), "cache_seqlens", "cache_seqlens[b] + seqlen_new (2) must be <= the cache capacity (10)");
  cache_seqlens.as<int32_t>()[0] = 8;  // exactly full
  EXPECT_OK(build());
}

TEST_F(KvCacheRules, DenseCacheNeedsARowPerSequence) {
  HostTensor one_row(DType::F16, {1, 10, 2, 16}), one_row_v(DType::F16, {1, 10, 2, 16});
  p.k_cache = one_row.view();
  p.v_cache = one_row_v.view();
  EXPECT_INVALID(build(), "k_cache", "dim 0 (batch_cache) must be >= the batch of q (2)");
}

TEST_F(KvCacheRules, CacheBatchIdx) {
  HostTensor idx = int_tensor({2, 0});
  p.cache_batch_idx = idx.view();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.k.batch_index, idx.data());
  EXPECT_EQ(problem.attn.k.offset(0, 1, 0), 2 * 320 + 32);
  idx.as<int32_t>()[1] = 3;
  EXPECT_INVALID(build(), "cache_batch_idx", "entries must be in [0, batch of k_cache (3))");
}

TEST_F(KvCacheRules, CacheLeftpadStartsEachSequence) {
  HostTensor leftpad = int_tensor({2, 8});
  p.cache_leftpad = leftpad.view();
  ASSERT_TRUE(build().ok());
  const AttnProblem& a = problem.attn;
  EXPECT_EQ(a.lens.k_leftpad, leftpad.data());
  EXPECT_EQ(a.lens.k(0), 3 + 2 - 2);  // positions [2, 5)
  EXPECT_EQ(a.lens.k(1), 8 + 2 - 8);  // only the appended keys
  EXPECT_EQ(a.k.row_offset, leftpad.data());
  EXPECT_EQ(a.v.row_offset, leftpad.data());
  EXPECT_EQ(a.k.offset(0, 0, 1), 2 * 32 + 16);  // key 0 of sequence 0 is cache position 2
  EXPECT_EQ(problem.first_new_position(1), 8);
  EXPECT_EQ(problem.new_key_row(1, 1), 1);  // appended key 1 of sequence 1: position 9, key 1
  use_paged_cache();
  ASSERT_TRUE(build().ok());
  // Sequence 1, key 1 = position 9: page 2 of row 1 -> block 4, slot 1.
  EXPECT_EQ(problem.attn.k.offset(1, 1, 0), 4 * 128 + 1 * 32);
}

TEST_F(KvCacheRules, CacheLeftpadRules) {
  HostTensor leftpad = int_tensor({0, 9});
  p.cache_leftpad = leftpad.view();
  EXPECT_INVALID(build(), "cache_leftpad", "cache_leftpad[b] must be <= cache_seqlens[b] (8), got cache_leftpad[1] = 9");
  leftpad.as<int32_t>()[1] = -1;
  EXPECT_INVALID(build(), "cache_leftpad", "entries must be >= 0, got cache_leftpad[1] = -1");
  p.cache_leftpad.dtype = DType::F32;
  EXPECT_INVALID(build(), "cache_leftpad", "dtype must be int32");
  HostTensor three = int_tensor({0, 0, 0});
  p.cache_leftpad = three.view();
  EXPECT_INVALID(build(), "cache_leftpad", "dim 0 must equal the batch of q (2), got 3");
  // Without cache_seqlens every slot up to the capacity is a candidate key.
  p.k_new = {};
  p.v_new = {};
  p.cache_seqlens = {};
  HostTensor past = int_tensor({10, 11});
  p.cache_leftpad = past.view();
  EXPECT_INVALID(build(), "cache_leftpad", "entries must be <= the cache capacity (10), got cache_leftpad[1] = 11");
  past.as<int32_t>()[1] = 10;
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.lens.k(1), 0);
}

TEST_F(KvCacheRules, CacheLeftpadSkipsUnreadPages) {
  use_paged_cache();
  HostTensor leftpad = int_tensor({0, 4});  // sequence 1 starts on its second page
  p.cache_leftpad = leftpad.view();
  block_table.as<int32_t>()[3] = -1;  // its first page: never read
  EXPECT_OK(build());
  leftpad.as<int32_t>()[1] = 3;
  EXPECT_INVALID(build(), "block_table", "entries for the pages in use must be in [0, num_blocks of k_cache (6))");
}

TEST_F(KvCacheRules, VarlenQueries) {
  // Sequence 0 has 3 query rows, sequence 1 one: q (4, 4, 16), out likewise, lse (4 heads, 4 rows).
  HostTensor qv(DType::F16, {4, 4, 16}), outv(DType::F16, {4, 4, 16}), lsev(DType::F32, {4, 4});
  HostTensor cu = int_tensor({0, 3, 4});
  p.q = qv.view();
  p.out = outv.view();
  p.softmax_lse = lsev.view();
  p.cu_seqlens_q = cu.view();
  ASSERT_TRUE(build().ok());
  const AttnProblem& a = problem.attn;
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.lens.seqlen_q, 3);  // derived: the longest sequence
  EXPECT_EQ(a.lens.total_q, 4);
  EXPECT_EQ(a.lens.q(1), 1);
  EXPECT_EQ(a.q.cu_seqlens, cu.data());
  EXPECT_EQ(a.out.offset(1, 0, 2), 3 * 64 + 2 * 16);
  EXPECT_EQ(a.lse.offset(1, 0, 2), 2 * 4 + 3);
  p.max_seqlen_q = 2;
  EXPECT_INVALID(build(), "max_seqlen_q", "must be >= the longest sequence (3), got 2");
  p.max_seqlen_q = 0;
  HostTensor three = int_tensor({0, 1, 2, 4});
  p.cu_seqlens_q = three.view();
  EXPECT_INVALID(build(), "cache_seqlens", "dim 0 must equal the batch of q (3), got 2");
  p.cu_seqlens_q = cu.view();
  p.q = q.view();
  EXPECT_INVALID(build(), "q", "ndim must be 3 (total_q, heads_q, head_dim) with cu_seqlens_q");
  p.q = qv.view();
  HostTensor dense_lse(DType::F32, {2, 4, 3});
  p.softmax_lse = dense_lse.view();
  EXPECT_INVALID(build(), "softmax_lse", "ndim must be 2 (heads_q, total_q) with cu_seqlens_q");
  p.softmax_lse = lsev.view();
  cu.as<int32_t>()[2] = 5;
  EXPECT_INVALID(build(), "cu_seqlens_q", "the last entry must be <= the rows of q (total_q) (4)");
}

TEST_F(KvCacheRules, CacheBatchIdxDistinctWhenAppending) {
  HostTensor idx = int_tensor({1, 1});
  p.cache_batch_idx = idx.view();
  EXPECT_INVALID(build(), "cache_batch_idx", "entries must be distinct when k_new is given");
  p.k_new = {};
  p.v_new = {};
  EXPECT_OK(build());  // reading one cache row twice is fine
}

TEST_F(KvCacheRules, CacheBatchIdxNotWithBlockTable) {
  use_paged_cache();
  HostTensor idx = int_tensor({0, 1});
  p.cache_batch_idx = idx.view();
  EXPECT_INVALID(build(), "cache_batch_idx", "must not be given together with 'block_table'");
}

TEST_F(KvCacheRules, BlockTableDtypeAndShape) {
  use_paged_cache();
  p.block_table.dtype = DType::F32;
  EXPECT_INVALID(build(), "block_table", "dtype must be int32");
  p.block_table = TensorView::contiguous(block_table.data(), DType::I32, {6});
  EXPECT_INVALID(build(), "block_table", "ndim must be 2 (batch, max_blocks_per_seq)");
  p.block_table = TensorView::contiguous(block_table.data(), DType::I32, {1, 6});
  EXPECT_INVALID(build(), "block_table", "dim 0 must equal the batch of q (2), got 1");
}

TEST_F(KvCacheRules, BlockTableEntriesInUseMustExist) {
  use_paged_cache();
  // Sequence 0 uses 3 + 2 = 5 keys: pages 0 and 1. Page 2 is not read: anything goes there.
  block_table.as<int32_t>()[2] = -1;
  EXPECT_OK(build());
  block_table.as<int32_t>()[1] = 6;  // only 6 blocks
  EXPECT_INVALID(build(), "block_table", "entries for the pages in use must be in [0, num_blocks of k_cache (6)), got block_table[0][1] = 6");
  block_table.as<int32_t>()[1] = 0;
  p.k_new = {};
  p.v_new = {};
  p.cache_seqlens = {};  // the whole row is in use
  EXPECT_INVALID(build(), "block_table", "got block_table[0][2] = -1");
}

// Sequence 0 appends at keys 3 and 4 (pages 0 and 1: blocks 5 and 0), sequence 1 at keys 8 and 9
// (page 2: block 4); sequence 1 reads blocks 1 and 2.
TEST_F(KvCacheRules, PagesAppendedIntoAreNotShared) {
  use_paged_cache();
  int32_t* table = block_table.as<int32_t>();
  EXPECT_OK(build());
  table[5] = 0;  // both sequences append into block 0 (the issue: block_table [[0], [0]])
  EXPECT_INVALID(build(), "block_table",
                 "a page that k_new is appended into must appear only once among the pages in use");
  EXPECT_INVALID(build(), "block_table", "got block 0 at block_table[0][1] (appended into) and at block_table[1][2]");
  table[5] = 4;
  table[3] = 5;  // sequence 1 would read keys sequence 0 is writing
  EXPECT_INVALID(build(), "block_table", "got block 5 at block_table[0][0] (appended into) and at block_table[1][0]");
  table[3] = 1;
  table[1] = 5;  // sequence 0 would write one page at two positions
  EXPECT_INVALID(build(), "block_table", "got block 5 at block_table[0][0] (appended into) and at block_table[0][1]");
  table[1] = 0;
  table[2] = 4;  // past sequence 0's keys: not in use, anything goes
  EXPECT_OK(build());
}

TEST_F(KvCacheRules, SharedPagesWithoutNewKeysAreFine) {
  use_paged_cache();
  int32_t* table = block_table.as<int32_t>();
  // Prefix sharing: block 5 is page 0 of both sequences.
  table[3] = 5;
  p.k_new = {};
  p.v_new = {};
  EXPECT_OK(build());  // reading only
  table[0] = table[1] = table[2] = table[3] = table[4] = table[5] = 2;
  EXPECT_OK(build());
  // Appending while sharing a full page nobody writes: sequence 0 has 4 keys (page 0 full) and
  // appends into page 1; sequence 1 appends into page 2.
  p.k_new = k_new.view();
  p.v_new = v_new.view();
  const int32_t pages[] = {5, 0, 3, 5, 2, 4};
  std::memcpy(table, pages, sizeof(pages));
  cache_seqlens.as<int32_t>()[0] = 4;
  EXPECT_OK(build());
  cache_seqlens.as<int32_t>()[0] = 3;  // now it appends into block 5 too
  EXPECT_INVALID(build(), "block_table", "got block 5 at block_table[0][0] (appended into) and at block_table[1][0]");
}

TEST_F(KvCacheRules, DeviceBlockTablesAreNotRead) {
  // The contents of a CUDA block_table cannot be read on the host: no sharing check (and no read).
  use_paged_cache();
  for (TensorView* t : {&p.q, &p.k_cache, &p.v_cache, &p.k_new, &p.v_new, &p.cache_seqlens, &p.block_table, &p.out,
                        &p.softmax_lse})
    *t = on_cuda(*t, fake_device_pointer(uintptr_t(t - &p.q) << 20));
  EXPECT_OK(build());
}

TEST_F(KvCacheRules, PagedCapacity) {
  use_paged_cache();
  cache_seqlens.as<int32_t>()[1] = 11;  // 11 + 2 > 12
  EXPECT_INVALID(build(), "cache_seqlens", "must be <= the cache capacity (12)");
}

TEST_F(KvCacheRules, PageSizeAtLeastOne) {
  use_paged_cache();
  p.k_cache.shape[1] = 0;
  p.v_cache.shape[1] = 0;
  EXPECT_INVALID(build(), "k_cache", "page_size (dim 1 of a paged cache) must be >= 1");
}

TEST_F(KvCacheRules, AnyPageSize) {
  HostTensor k7(DType::F16, {6, 7, 2, 16}), v7(DType::F16, {6, 7, 2, 16});
  use_paged_cache();
  p.k_cache = k7.view();
  p.v_cache = v7.view();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.k.page_size, 7);
  EXPECT_EQ(problem.attn.k.offset(1, 8, 0), 2 * (7 * 32) + 1 * 32);  // page 1 of row 1 is block 2
}

TEST_F(KvCacheRules, RotaryTables) {
  use_rotary();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.rotary.cos, cos.data());
  EXPECT_EQ(problem.rotary.sin, sin.data());
  EXPECT_EQ(problem.rotary.rotary_dim, 8);
  EXPECT_EQ(problem.rotary.row_stride, 4);
  EXPECT_EQ(problem.rotary.seqlen_ro, 12);
  p.rotary_interleaved = true;
  ASSERT_TRUE(build().ok());
  EXPECT_TRUE(problem.rotary.interleaved);
}

TEST_F(KvCacheRules, RotaryComesInPairs) {
  p.rotary_cos = cos.view();
  EXPECT_INVALID(build(), "rotary_sin", "must be given together with 'rotary_cos'");
}

TEST_F(KvCacheRules, RotaryShapes) {
  use_rotary();
  HostTensor other(DType::F16, {12, 2});
  p.rotary_sin = other.view();
  EXPECT_INVALID(build(), "rotary_sin", "shape must equal the shape of 'rotary_cos' [12, 4]");
  HostTensor wide_cos(DType::F16, {12, 12}), wide_sin(DType::F16, {12, 12});  // rotary_dim 24 > 16
  p.rotary_cos = wide_cos.view();
  p.rotary_sin = wide_sin.view();
  EXPECT_INVALID(build(), "rotary_cos", "rotary_dim (2 * dim 1) must be even and in [2, head_dim (16)], got 24");
}

TEST_F(KvCacheRules, RotaryDtype) {
  use_rotary();
  p.rotary_cos.dtype = DType::BF16;
  EXPECT_INVALID(build(), "rotary_cos", "dtype must equal the dtype of 'q'");
}

TEST_F(KvCacheRules, RotaryStridesMatch) {
  use_rotary();
  HostTensor padded(DType::F16, {12, 8});
  p.rotary_sin = TensorView::strided(padded.data(), DType::F16, {12, 4}, {8, 1});
  EXPECT_INVALID(build(), "rotary_sin", "strides must equal those of 'rotary_cos'");
}

TEST_F(KvCacheRules, RotaryTableCoversEveryPosition) {
  use_rotary();
  // Sequence 1: 8 cached + 2 new keys use positions up to 9; the table has 12 rows.
  HostTensor short_cos(DType::F16, {9, 4}), short_sin(DType::F16, {9, 4});
  p.rotary_cos = short_cos.view();
  p.rotary_sin = short_sin.view();
  EXPECT_INVALID(build(), "rotary_cos", "seqlen_ro (dim 0) must cover every rotated position (sequence 1 uses positions up to 9), got 9");
  HostTensor exact_cos(DType::F16, {10, 4}), exact_sin(DType::F16, {10, 4});
  p.rotary_cos = exact_cos.view();
  p.rotary_sin = exact_sin.view();
  EXPECT_OK(build());
}

TEST_F(KvCacheRules, RotaryQueryPositionsPerRowWithCausalOrLocal) {
  HostTensor q3(DType::F16, {2, 3, 4, 16}), out3(DType::F16, {2, 3, 4, 16}), lse3(DType::F32, {2, 4, 3});
  p.q = q3.view();
  p.out = out3.view();
  p.softmax_lse = lse3.view();
  use_rotary();
  ASSERT_TRUE(build().ok());
  EXPECT_FALSE(problem.rotary_q_per_row);
  p.causal = true;
  // q rows of sequence 1 sit at 8, 9, 10: the 12-row table covers them.
  ASSERT_TRUE(build().ok());
  EXPECT_TRUE(problem.rotary_q_per_row);
  EXPECT_EQ(problem.attn.mask.window_right, 0);
  p.causal = false;
  p.window_left = 4;
  ASSERT_TRUE(build().ok());
  EXPECT_TRUE(problem.rotary_q_per_row);
  HostTensor q5(DType::F16, {2, 5, 4, 16}), out5(DType::F16, {2, 5, 4, 16}), lse5(DType::F32, {2, 4, 5});
  p.q = q5.view();
  p.out = out5.view();
  p.softmax_lse = lse5.view();
  EXPECT_INVALID(build(), "rotary_cos", "uses positions up to 12");  // 8 + 5 rows
}

TEST_F(KvCacheRules, OutputsMustNotOverlapTheCache) {
  p.out = TensorView::contiguous(k_cache.data(), DType::F16, {2, 1, 4, 16});
  EXPECT_INVALID(build(), "k_cache", "must not overlap the memory of 'out'");
  p.k_new = {};
  p.v_new = {};
  EXPECT_INVALID(build(), "out", "must not overlap the memory of 'k_cache'");
}

TEST_F(KvCacheRules, SharedKeyValueCache) {
  p.v_cache = k_cache.view();  // one buffer for both: fine to read, not to append to
  EXPECT_INVALID(build(), "v_cache", "must not overlap the memory of 'k_cache'");
  p.k_new = {};
  p.v_new = {};
  EXPECT_OK(build());
}

TEST_F(KvCacheRules, InterleavedKvCacheAppends) {
  // vLLM-style (num_blocks, 2, page, heads, d): k and v pages alternate in one buffer.
  HostTensor kv(DType::F16, {6, 2, 4, 2, 16});
  auto* base = static_cast<uint16_t*>(kv.data());
  const std::initializer_list<int64_t> strides = {2 * 4 * 32, 32, 16, 1};
  use_paged_cache();
  p.k_cache = TensorView::strided(base, DType::F16, {6, 4, 2, 16}, strides);
  p.v_cache = TensorView::strided(base + 4 * 32, DType::F16, {6, 4, 2, 16}, strides);
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.v.offset(0, 0, 0), 5 * 256);
}

TEST_F(KvCacheRules, NumSplitsAndWindow) {
  p.num_splits = 300;
  EXPECT_INVALID(build(), "num_splits", "must be in [0, 256]");
  p.num_splits = 0;
  p.window_left = -3;
  EXPECT_INVALID(build(), "window_left", "must be >= -1");
}

// ---------------------------------------------------------------------------------------------
// Combine
// ---------------------------------------------------------------------------------------------
class CombineRules : public ::testing::Test {
 protected:
  CombineRules() {
    p.out_partial = out_partial.view();
    p.lse_partial = lse_partial.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
  }
  Status build() { return make_combine_problem(p, &problem); }

  HostTensor out_partial{DType::F32, {3, 2, 5, 4, 16}}, lse_partial{DType::F32, {3, 2, 4, 5}};
  HostTensor out{DType::BF16, {2, 5, 4, 16}}, lse{DType::F32, {2, 4, 5}};
  CombineParams p;
  CombineProblem problem;
};

TEST_F(CombineRules, WorkspaceAllocatorNeedsBothFunctions) {
  p.workspace.release = workspace_release;
  EXPECT_INVALID(build(), "workspace", "release without allocate");
  p.workspace.allocate = workspace_allocate;
  EXPECT_OK(build());
}

TEST_F(CombineRules, ValidDense) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.splits, 3);
  EXPECT_EQ(problem.batch, 2);
  EXPECT_EQ(problem.seqlen, 5);
  EXPECT_EQ(problem.heads, 4);
  EXPECT_EQ(problem.head_dim, 16);
  EXPECT_EQ(problem.out_dtype, DType::BF16);
  // (s=2, b=1, i=3, h=1)
  EXPECT_EQ(problem.out_partial_strides.offset(2, 1, 3, 1), 2 * 640 + 1 * 320 + 3 * 64 + 16);
  EXPECT_EQ(problem.lse_partial_strides.offset(2, 1, 3, 1), 2 * 40 + 1 * 20 + 1 * 5 + 3);
  EXPECT_EQ(problem.out_strides.offset(0, 1, 3, 1), 320 + 3 * 64 + 16);
  EXPECT_EQ(problem.lse_strides.offset(0, 1, 3, 1), 20 + 5 + 3);
}

TEST_F(CombineRules, ValidVarlen) {
  HostTensor op(DType::F32, {3, 9, 4, 16}), lp(DType::F32, {3, 4, 9}), o(DType::F16, {9, 4, 16}), l(DType::F32, {4, 9});
  p.out_partial = op.view();
  p.lse_partial = lp.view();
  p.out = o.view();
  p.softmax_lse = l.view();
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.batch, 1);
  EXPECT_EQ(problem.seqlen, 9);
  EXPECT_EQ(problem.lse_partial_strides.offset(1, 0, 7, 2), 36 + 2 * 9 + 7);
  EXPECT_EQ(problem.out_strides.offset(0, 0, 7, 2), 7 * 64 + 32);
  EXPECT_EQ(problem.lse_strides.offset(0, 0, 7, 2), 2 * 9 + 7);
}

TEST_F(CombineRules, PartialsMustBeFloat32) {
  p.out_partial.dtype = DType::F16;
  EXPECT_INVALID(build(), "out_partial", "dtype must be float32");
  p.out_partial.dtype = DType::F32;
  p.lse_partial.dtype = DType::BF16;
  EXPECT_INVALID(build(), "lse_partial", "dtype must be float32");
}

TEST_F(CombineRules, OutDtype) {
  p.out.dtype = DType::I32;
  EXPECT_INVALID(build(), "out", "dtype must be float32, float16 or bfloat16");
}

TEST_F(CombineRules, Ranks) {
  p.out_partial = TensorView::contiguous(out_partial.data(), DType::F32, {6, 5, 64});
  EXPECT_INVALID(build(), "out_partial", "ndim must be 5");
  p.out_partial = out_partial.view();
  p.out = TensorView::contiguous(out.data(), DType::BF16, {10, 4, 16});
  EXPECT_INVALID(build(), "out", "ndim must be 4 (batch, seqlen, heads, head_dim)");
}

TEST_F(CombineRules, AtLeastOneSplit) {
  p.out_partial.shape[0] = 0;
  p.lse_partial.shape[0] = 0;
  EXPECT_INVALID(build(), "out_partial", "the number of splits (dim 0) must be >= 1");
}

TEST_F(CombineRules, ShapesAgree) {
  HostTensor lp(DType::F32, {3, 2, 5, 4});  // seqlen and heads swapped
  p.lse_partial = lp.view();
  EXPECT_INVALID(build(), "lse_partial", "dim 2 must equal the heads of out_partial (4), got 5");
  p.lse_partial = lse_partial.view();
  p.softmax_lse.shape[0] = 1;
  EXPECT_INVALID(build(), "softmax_lse", "dim 0 must equal the batch of out_partial (2)");
}

TEST_F(CombineRules, OutputMustNotOverlapPartials) {
  p.out = TensorView::contiguous(out_partial.data(), DType::F32, {2, 5, 4, 16});
  EXPECT_INVALID(build(), "out", "must not overlap the memory of 'out_partial'");
}

TEST_F(CombineRules, Devices) {
  p.out = on_cuda(p.out, fake_device_pointer());
  EXPECT_INVALID(build(), "out", "must be on the device of 'out_partial' (cpu)");
}

// ---------------------------------------------------------------------------------------------
// Dropout mask
// ---------------------------------------------------------------------------------------------
TEST(DropoutMaskRules, EachRule) {
  HostTensor mask(DType::U8, {2, 3, 4, 5});
  DropoutMaskParams p;
  p.mask = mask.view();
  p.dropout_p = 0.5f;
  EXPECT_OK(api::validate_dropout_mask(p));
  p.dropout_p = 1.f;
  EXPECT_INVALID(api::validate_dropout_mask(p), "dropout_p", "must be in [0, 1)");
  p.dropout_p = 0.5f;
  p.mask.dtype = DType::F32;
  EXPECT_INVALID(api::validate_dropout_mask(p), "mask", "dtype must be uint8");
  p.mask = TensorView::contiguous(mask.data(), DType::U8, {6, 4, 5});
  EXPECT_INVALID(api::validate_dropout_mask(p), "mask", "ndim must be 4");
  p.mask = TensorView::strided(mask.data(), DType::U8, {2, 3, 4, 2}, {60, 20, 5, 2});
  EXPECT_INVALID(api::validate_dropout_mask(p), "mask", "must be contiguous");
  p.mask = on_cuda(mask.view(), fake_device_pointer());
  EXPECT_INVALID(dropout_mask(p), "mask", "must be a host tensor");
  p.mask = {};
  EXPECT_INVALID(dropout_mask(p), "mask", "is required");
}

// ---------------------------------------------------------------------------------------------
// Fuzz: random mutations of valid calls. Validation must return (ok or an error naming an
// argument) and never crash. Index tensors keep their shapes within their buffers and their
// pointers valid (validation reads them, as a kernel would); everything else may be garbage.
// ---------------------------------------------------------------------------------------------
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  int64_t pick(std::initializer_list<int64_t> values) {
    return *(values.begin() + std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng_));
  }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }

  // Anything goes for a tensor validation never reads.
  void mutate_data_tensor(TensorView& t) {
    const int dim = uniform(0, kMaxDims - 1);
    switch (uniform(0, 8)) {
      case 0: t.ndim = int(pick({-2, 0, 1, 2, 3, 4, 5, 6, 9})); break;
      case 1:
        t.shape[dim] = pick({-1, 0, 1, 2, 3, 7, 8, 16, 17, 64, 255, 256, 264, int64_t(1) << 31,
                             int64_t(1) << 40, int64_t(1) << 62, INT64_MAX});
        break;
      case 2: t.stride[dim] = pick({-1, 0, 1, 2, 16, 17, 4096, int64_t(1) << 40, INT64_MAX}); break;
      case 3: t.dtype = static_cast<DType>(uniform(0, 8)); break;
      case 4: t.device = coin(0.8) ? DeviceType::Cuda : static_cast<DeviceType>(uniform(2, 5)); break;
      case 5: t.device_index = int(pick({-1, 0, 1, 7})); break;
      case 6:
        t.data = reinterpret_cast<void*>(
            pick({0, 1, 3, 16, 4096, int64_t(1) << 40, int64_t(-64), int64_t(-2), int64_t(-4096)}));
        break;
      case 7: t = TensorView{}; break;
      case 8:
        t.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(t.data) + uintptr_t(uniform(1, 15)));
        break;
    }
  }

  // Validation reads index tensors on the host: only shapes within the buffer (capacity
  // entries), dtypes, devices, and garbage contents.
  void mutate_index_tensor(TensorView& t, int32_t* buffer, int capacity) {
    switch (uniform(0, 5)) {
      case 0: t.shape[0] = uniform(0, capacity); break;
      case 1: t.dtype = static_cast<DType>(uniform(0, 6)); break;
      case 2: t.device = DeviceType::Cuda; break;
      case 3:
        for (int i = 0; i < capacity; ++i) buffer[i] = int32_t(pick({-5, -1, 0, 1, 2, 3, 5, 7, 100, INT32_MAX, INT32_MIN}));
        break;
      case 4: t = TensorView{}; break;
      case 5: t.ndim = int(pick({0, 2, 3})); break;
    }
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

TEST(ValidationFuzz, RandomFwdMutationsNeverCrash) {
  Mutator m(20240601);
  constexpr int kCapacity = 64;  // entries in every index buffer
  HostTensor q(DType::F16, {2, 5, 4, 16}), k(DType::F16, {2, 7, 2, 16}), v(DType::F16, {2, 7, 2, 16});
  HostTensor out(DType::F16, {2, 5, 4, 16}), lse(DType::F32, {2, 4, 5}), alibi(DType::F32, {4});
  HostTensor cu_q(DType::I32, {kCapacity}), cu_k(DType::I32, {kCapacity}), seqused(DType::I32, {kCapacity});
  int ok = 0, errors = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    const bool varlen = m.coin();
    FwdParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    if (m.coin(0.3)) p.alibi_slopes = alibi.view();
    if (varlen) {  // a valid varlen call over the same buffers: 2 sequences
      const int32_t cq[] = {0, 4, 10}, ck[] = {0, 9, 14};
      std::memcpy(cu_q.data(), cq, sizeof(cq));
      std::memcpy(cu_k.data(), ck, sizeof(ck));
      p.q = TensorView::contiguous(q.data(), DType::F16, {10, 4, 16});
      p.k = TensorView::contiguous(k.data(), DType::F16, {14, 2, 16});
      p.v = TensorView::contiguous(v.data(), DType::F16, {14, 2, 16});
      p.out = TensorView::contiguous(out.data(), DType::F16, {10, 4, 16});
      p.softmax_lse = TensorView::contiguous(lse.data(), DType::F32, {4, 10});
      p.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::I32, {3});
      p.cu_seqlens_k = TensorView::contiguous(cu_k.data(), DType::I32, {3});
    }
    if (m.coin(0.3)) {
      const int32_t used[] = {3, 5};
      std::memcpy(seqused.data(), used, sizeof(used));
      p.seqused_k = TensorView::contiguous(seqused.data(), DType::I32, {2});
    }
    const int mutations = m.uniform(1, 4);
    for (int i = 0; i < mutations; ++i) {
      switch (m.uniform(0, 9)) {
        case 0: m.mutate_data_tensor(p.q); break;
        case 1: m.mutate_data_tensor(p.k); break;
        case 2: m.mutate_data_tensor(p.v); break;
        case 3: m.mutate_data_tensor(p.out); break;
        case 4: m.mutate_data_tensor(m.coin() ? p.softmax_lse : p.alibi_slopes); break;
        case 5: m.mutate_index_tensor(p.cu_seqlens_q, cu_q.as<int32_t>(), kCapacity); break;
        case 6: m.mutate_index_tensor(p.cu_seqlens_k, cu_k.as<int32_t>(), kCapacity); break;
        case 7: m.mutate_index_tensor(p.seqused_k, seqused.as<int32_t>(), kCapacity); break;
        case 8:
          p.window_left = int(m.pick({-7, -1, 0, 3, INT32_MAX}));
          p.window_right = int(m.pick({-2, -1, 0, 5, INT32_MIN}));
          p.causal = m.coin();
          p.num_splits = int(m.pick({-1, 0, 1, 7, 256, 257}));
          p.backend = static_cast<Backend>(m.uniform(0, 5));
          break;
        case 9:
          p.softcap = float(m.pick({-1, 0, 5})) * (m.coin(0.2) ? INFINITY : 1.f);
          if (m.coin(0.2)) p.softmax_scale = std::nanf("");
          p.dropout_p = m.coin(0.2) ? 1.5f : 0.1f;
          p.max_seqlen_q = int(m.pick({-1, 0, 1, 4, 100}));
          p.max_seqlen_k = int(m.pick({-1, 0, 1, 9, 100}));
          break;
      }
    }
    AttnProblem problem;
    const Status st = make_fwd_problem(p, &problem, {.allow_f32_outputs = m.coin()});
    if (st.ok()) {
      ++ok;
      // Whatever passed is self-consistent.
      EXPECT_GE(problem.head_dim, 8);
      EXPECT_LE(problem.head_dim, 256);
      EXPECT_EQ(problem.heads_q % problem.heads_k, 0);
      EXPECT_GE(problem.batch, 0);
    } else {
      ++errors;
      EXPECT_FALSE(st.argument().empty()) << st.message();
      EXPECT_NE(st.message().find("argument '" + st.argument() + "'"), std::string::npos) << st.message();
    }
  }
  EXPECT_GT(ok, 0);  // the mutations do not all break the call
  EXPECT_GT(errors, 1000);
}

TEST(ValidationFuzz, RandomKvCacheMutationsNeverCrash) {
  Mutator m(777);
  constexpr int kCapacity = 16;
  HostTensor q(DType::BF16, {2, 3, 4, 16}), out(DType::BF16, {2, 3, 4, 16}), lse(DType::F32, {2, 4, 3});
  HostTensor k_cache(DType::BF16, {6, 4, 2, 16}), v_cache(DType::BF16, {6, 4, 2, 16});
  HostTensor k_new(DType::BF16, {2, 2, 2, 16}), v_new(DType::BF16, {2, 2, 2, 16});
  HostTensor cos(DType::BF16, {32, 4}), sin(DType::BF16, {32, 4});
  HostTensor seqlens(DType::I32, {kCapacity}), batch_idx(DType::I32, {kCapacity}), table(DType::I32, {kCapacity, 3});
  int ok = 0;
  for (int iteration = 0; iteration < 1000; ++iteration) {
    const bool paged = m.coin();
    const int32_t lens[] = {3, 9};
    std::memcpy(seqlens.data(), lens, sizeof(lens));
    const int32_t pages[] = {5, 0, 3, 1, 2, 4};
    std::memcpy(table.data(), pages, sizeof(pages));
    const int32_t rows[] = {4, 1};
    std::memcpy(batch_idx.data(), rows, sizeof(rows));
    KvCacheParams p;
    p.q = q.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.k_cache = k_cache.view();
    p.v_cache = v_cache.view();
    if (m.coin()) {
      p.k_new = k_new.view();
      p.v_new = v_new.view();
    }
    p.cache_seqlens = TensorView::contiguous(seqlens.data(), DType::I32, {2});
    if (paged) {
      p.block_table = TensorView::contiguous(table.data(), DType::I32, {2, 3});
    } else if (m.coin()) {
      p.cache_batch_idx = TensorView::contiguous(batch_idx.data(), DType::I32, {2});
    }
    if (m.coin()) {
      p.rotary_cos = cos.view();
      p.rotary_sin = sin.view();
    }
    const int mutations = m.uniform(1, 3);
    for (int i = 0; i < mutations; ++i) {
      switch (m.uniform(0, 9)) {
        case 0: m.mutate_data_tensor(p.q); break;
        case 1: m.mutate_data_tensor(m.coin() ? p.k_cache : p.v_cache); break;
        case 2: m.mutate_data_tensor(m.coin() ? p.k_new : p.v_new); break;
        case 3: m.mutate_data_tensor(m.coin() ? p.out : p.softmax_lse); break;
        case 4: m.mutate_data_tensor(m.coin() ? p.rotary_cos : p.rotary_sin); break;
        case 5: m.mutate_index_tensor(p.cache_seqlens, seqlens.as<int32_t>(), kCapacity); break;
        case 6: m.mutate_index_tensor(p.cache_batch_idx, batch_idx.as<int32_t>(), kCapacity); break;
        case 7:  // the block table keeps 3 columns; its rows may grow within the buffer
          if (m.coin()) {
            p.block_table.shape[0] = m.uniform(0, kCapacity);
          } else {
            for (int e = 0; e < kCapacity * 3; ++e) table.as<int32_t>()[e] = int32_t(m.pick({-1, 0, 3, 5, 6, 1000}));
          }
          break;
        case 8:
          p.causal = m.coin();
          p.window_left = int(m.pick({-3, -1, 0, 2}));
          p.num_splits = int(m.pick({-1, 0, 3, 300}));
          break;
        case 9: p.rotary_interleaved = m.coin(); break;
      }
    }
    KvCacheProblem problem;
    const Status st = make_kvcache_problem(p, &problem);
    if (st.ok()) {
      ++ok;
    } else {
      EXPECT_FALSE(st.argument().empty()) << st.message();
    }
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace flashattn::test
