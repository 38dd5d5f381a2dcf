// Validation of fp8 (float8_e4m3fn) calls: the descale arguments, the output dtypes, what fp8
// inputs refuse (dropout, backward, rotary), how the problem carries the descales, and that no GPU
// backend takes fp8 until its kernels exist.
#include <gtest/gtest.h>

#include "api/validate.h"
#include "status_assertions.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

using api::make_bwd_problem;
using api::make_fwd_problem;
using api::make_kvcache_problem;

// Batch 2, seqlen_q 5, seqlen_k 7, heads 4/2 (GQA), head_dim 16; out bfloat16; descales (2, 2).
class Fp8FwdRules : public ::testing::Test {
 protected:
  Fp8FwdRules() {
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    for (HostTensor* d : {&q_descale, &k_descale, &v_descale})
      for (int64_t i = 0; i < 4; ++i) d->set(i, 1.f + float(i));
    p.q_descale = q_descale.view();
    p.k_descale = k_descale.view();
    p.v_descale = v_descale.view();
  }
  Status build(api::ProblemOptions options = {}) { return make_fwd_problem(p, &problem, options); }

  HostTensor q{DType::F8E4M3, {2, 5, 4, 16}}, k{DType::F8E4M3, {2, 7, 2, 16}}, v{DType::F8E4M3, {2, 7, 2, 16}};
  HostTensor out{DType::BF16, {2, 5, 4, 16}}, lse{DType::F32, {2, 4, 5}};
  HostTensor q_descale{DType::F32, {2, 2}}, k_descale{DType::F32, {2, 2}}, v_descale{DType::F32, {2, 2}};
  FwdParams p;
  AttnProblem problem;
};

TEST_F(Fp8FwdRules, ValidCallCarriesTheDescales) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.dtype, DType::F8E4M3);
  EXPECT_EQ(problem.out_dtype, DType::BF16);
  EXPECT_TRUE(problem.has_descales());
  EXPECT_EQ(problem.k_descale.data, k_descale.data());
  EXPECT_EQ(problem.k_descale.batch_stride, 2);
  EXPECT_EQ(problem.k_descale.head_stride, 1);
  // q's factor is that of the query head's kv head: query heads 2 and 3 share kv head 1.
  q_descale.set(3, 0.5f);  // [1][1]
  EXPECT_EQ(problem.descale_q(1, 2), 0.5f);
  EXPECT_EQ(problem.descale_q(1, 3), 0.5f);
  EXPECT_EQ(problem.descale_q(1, 1), 3.f);  // [1][0]
  EXPECT_EQ(problem.descale_k(0, 1), 2.f);  // [0][1]
  EXPECT_EQ(problem.descale_v(1, 0), 3.f);  // [1][0]
}

TEST_F(Fp8FwdRules, DescalesAreOptionalEachAlone) {
  p.q_descale = p.v_descale = {};
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.descale_q(1, 3), 1.f);
  EXPECT_EQ(problem.descale_v(1, 1), 1.f);
  EXPECT_EQ(problem.descale_k(1, 1), 4.f);
  p.k_descale = {};
  ASSERT_TRUE(build().ok());
  EXPECT_FALSE(problem.has_descales());
}

TEST_F(Fp8FwdRules, AnyStridesIncludingABroadcastFactor) {
  // One per-tensor factor expanded to (batch, heads_k), and a transposed (heads_k, batch) buffer.
  HostTensor one(DType::F32, {1});
  one.set(0, 0.25f);
  p.q_descale = TensorView::strided(one.data(), DType::F32, {2, 2}, {0, 0});
  p.k_descale = TensorView::strided(k_descale.data(), DType::F32, {2, 2}, {1, 2});
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.descale_q(1, 3), 0.25f);
  EXPECT_EQ(problem.descale_k(0, 1), 3.f);  // element [1][0] of the buffer
}

TEST_F(Fp8FwdRules, OutIsBfloat16OrFloat16) {
  HostTensor out16(DType::F16, {2, 5, 4, 16}), out32(DType::F32, {2, 5, 4, 16}), out8(DType::F8E4M3, {2, 5, 4, 16});
  p.out = out16.view();
  EXPECT_OK(build());
  p.out = out8.view();
  EXPECT_INVALID(build(), "out", "dtype must be bfloat16 or float16 for float8_e4m3fn inputs");
  p.out = out32.view();
  EXPECT_INVALID(build(), "out", "dtype must be bfloat16 or float16 for float8_e4m3fn inputs");
  EXPECT_OK(build({.allow_f32_outputs = true}));  // the tests' reference
}

TEST_F(Fp8FwdRules, AllThreeInputsAreFp8) {
  HostTensor k16(DType::BF16, {2, 7, 2, 16});
  p.k = k16.view();
  EXPECT_INVALID(build(), "k", "dtype must equal the dtype of 'q' (float8_e4m3fn)");
  p.k = k.view();
  p.v.dtype = DType::BF16;
  EXPECT_INVALID(build(), "v", "dtype must equal the dtype of 'q' (float8_e4m3fn)");
}

TEST_F(Fp8FwdRules, DescalesNeedFp8Inputs) {
  HostTensor q16(DType::BF16, {2, 5, 4, 16}), k16(DType::BF16, {2, 7, 2, 16}), v16(DType::BF16, {2, 7, 2, 16});
  p.q = q16.view();
  p.k = k16.view();
  p.v = v16.view();
  EXPECT_INVALID(build(), "q_descale", "is only for float8_e4m3fn inputs (q is bfloat16; leave it unset)");
  p.q_descale = {};
  EXPECT_INVALID(build(), "k_descale", "is only for float8_e4m3fn inputs");
  p.k_descale = {};
  EXPECT_INVALID(build(), "v_descale", "is only for float8_e4m3fn inputs");
  p.v_descale = {};
  EXPECT_OK(build());
}

TEST_F(Fp8FwdRules, DescaleDtype) {
  p.v_descale.dtype = DType::F16;
  EXPECT_INVALID(build(), "v_descale", "dtype must be float32");
}

TEST_F(Fp8FwdRules, DescaleShapeIsBatchByHeadsK) {
  HostTensor per_query_head(DType::F32, {2, 4}), flat(DType::F32, {4}), wrong_batch(DType::F32, {3, 2});
  p.q_descale = per_query_head.view();  // FlashAttention-3 takes q's factors per kv head too
  EXPECT_INVALID(build(), "q_descale", "dim 1 must equal heads_k of k (2), got 4");
  p.q_descale = flat.view();
  EXPECT_INVALID(build(), "q_descale", "ndim must be 2 (batch, heads_k)");
  p.q_descale = q_descale.view();
  p.k_descale = wrong_batch.view();
  EXPECT_INVALID(build(), "k_descale", "dim 0 must equal the batch (2), got 3");
}

TEST_F(Fp8FwdRules, DescaleLayoutAndPlacement) {
  p.k_descale.data = static_cast<char*>(k_descale.data()) + 2;
  EXPECT_INVALID(build(), "k_descale", "aligned to its element size (4 bytes)");
  p.k_descale.data = nullptr;
  EXPECT_INVALID(build(), "k_descale", "data must be non-null");
  p.k_descale = k_descale.view();
  p.k_descale.stride[0] = -2;
  EXPECT_EQ(build().argument(), "k_descale");
  p.k_descale = k_descale.view();
  p.k_descale.device = DeviceType::Cuda;
  EXPECT_INVALID(build(), "k_descale", "must be on the device of 'q' (cpu)");
}

TEST_F(Fp8FwdRules, OutMustNotOverlapADescale) {
  HostTensor shared(DType::F32, {2 * 5 * 4 * 16 / 2});  // out's bytes, q_descale at their start
  p.out = TensorView::contiguous(shared.data(), DType::BF16, {2, 5, 4, 16});
  p.q_descale = TensorView::contiguous(shared.data(), DType::F32, {2, 2});
  EXPECT_INVALID(build(), "out", "must not overlap the memory of 'q_descale'");
}

TEST_F(Fp8FwdRules, NoDropout) {
  p.dropout_p = 0.1f;
  EXPECT_INVALID(build(), "dropout_p", "must be 0 with float8_e4m3fn inputs");
}

TEST_F(Fp8FwdRules, EveryOtherFeatureIsValid) {
  HostTensor slopes(DType::F32, {4});
  p.causal = true;
  p.window_left = 3;
  p.softcap = 5.f;
  p.alibi_slopes = slopes.view();
  p.num_splits = 3;
  EXPECT_OK(build());
}

TEST_F(Fp8FwdRules, VarlenDescalesAreBatchOfCuSeqlens) {
  // Three sequences over the same 10 query and 14 key rows.
  HostTensor cu_q = int_tensor({0, 4, 4, 10}), cu_k = int_tensor({0, 9, 12, 14});
  HostTensor d3(DType::F32, {3, 2});
  p.q = TensorView::contiguous(q.data(), DType::F8E4M3, {10, 4, 16});
  p.k = TensorView::contiguous(k.data(), DType::F8E4M3, {14, 2, 16});
  p.v = TensorView::contiguous(v.data(), DType::F8E4M3, {14, 2, 16});
  p.out = TensorView::contiguous(out.data(), DType::BF16, {10, 4, 16});
  p.softmax_lse = TensorView::contiguous(lse.data(), DType::F32, {4, 10});
  p.cu_seqlens_q = cu_q.view();
  p.cu_seqlens_k = cu_k.view();
  EXPECT_INVALID(build(), "q_descale", "dim 0 must equal the batch (3), got 2");
  p.q_descale = p.k_descale = p.v_descale = d3.view();
  EXPECT_OK(build());
}

TEST(Fp8BwdRules, NoBackward) {
  HostTensor q(DType::F8E4M3, {1, 3, 2, 16}), k(DType::F8E4M3, {1, 3, 2, 16}), v(DType::F8E4M3, {1, 3, 2, 16});
  HostTensor out(DType::BF16, {1, 3, 2, 16}), dout(DType::BF16, {1, 3, 2, 16}), lse(DType::F32, {1, 2, 3});
  HostTensor dq(DType::BF16, {1, 3, 2, 16}), dk(DType::BF16, {1, 3, 2, 16}), dv(DType::BF16, {1, 3, 2, 16});
  BwdParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  p.dout = dout.view();
  p.softmax_lse = lse.view();
  p.dq = dq.view();
  p.dk = dk.view();
  p.dv = dv.view();
  BwdProblem problem;
  EXPECT_UNSUPPORTED(make_bwd_problem(p, &problem), "q", "float8_e4m3fn inputs have no backward, as in FlashAttention-3");
  EXPECT_UNSUPPORTED(bwd(p), "q", "have no backward");
}

// ---------------------------------------------------------------------------------------------
// fwd_kvcache: batch 2, one query, heads 4/2, d 16, a dense cache of 3 rows x 10 slots, two keys
// appended; descales by q's batch entry.
// ---------------------------------------------------------------------------------------------
class Fp8KvCacheRules : public ::testing::Test {
 protected:
  Fp8KvCacheRules() {
    p.q = q.view();
    p.k_cache = k_cache.view();
    p.v_cache = v_cache.view();
    p.k_new = k_new.view();
    p.v_new = v_new.view();
    p.cache_seqlens = cache_seqlens.view();
    p.out = out.view();
    p.q_descale = descale.view();
    p.k_descale = descale.view();
    p.v_descale = descale.view();
  }
  Status build() { return make_kvcache_problem(p, &problem); }

  HostTensor q{DType::F8E4M3, {2, 1, 4, 16}}, out{DType::BF16, {2, 1, 4, 16}};
  HostTensor k_cache{DType::F8E4M3, {3, 10, 2, 16}}, v_cache{DType::F8E4M3, {3, 10, 2, 16}};
  HostTensor k_new{DType::F8E4M3, {2, 2, 2, 16}}, v_new{DType::F8E4M3, {2, 2, 2, 16}};
  HostTensor cache_seqlens = int_tensor({3, 6});
  HostTensor descale{DType::F32, {2, 2}};
  KvCacheParams p;
  KvCacheProblem problem;
};

TEST_F(Fp8KvCacheRules, ValidCallCarriesTheDescales) {
  ASSERT_TRUE(build().ok());
  EXPECT_EQ(problem.attn.dtype, DType::F8E4M3);
  EXPECT_EQ(problem.attn.q_descale.data, descale.data());
  EXPECT_EQ(problem.attn.v_descale.batch_stride, 2);
}

TEST_F(Fp8KvCacheRules, DescalesFollowTheBatchOfQNotOfTheCache) {
  HostTensor cache_rows(DType::F32, {3, 2});
  p.k_descale = cache_rows.view();
  EXPECT_INVALID(build(), "k_descale", "dim 0 must equal the batch (2), got 3");
}

TEST_F(Fp8KvCacheRules, NewKeysAreFp8Too) {
  HostTensor k16(DType::BF16, {2, 2, 2, 16});
  p.k_new = k16.view();
  EXPECT_INVALID(build(), "k_new", "dtype must equal the dtype of 'q' (float8_e4m3fn)");
}

TEST_F(Fp8KvCacheRules, OutIsBfloat16OrFloat16) {
  p.out.dtype = DType::F8E4M3;
  EXPECT_INVALID(build(), "out", "dtype must be bfloat16 or float16 for float8_e4m3fn inputs");
}

TEST_F(Fp8KvCacheRules, NoRotary) {
  HostTensor cos(DType::F8E4M3, {16, 4}), sin(DType::F8E4M3, {16, 4});
  p.rotary_cos = cos.view();
  p.rotary_sin = sin.view();
  EXPECT_INVALID(build(), "rotary_cos", "must not be given with float8_e4m3fn inputs");
}

TEST_F(Fp8KvCacheRules, DescalesNeedFp8Inputs) {
  HostTensor q16(DType::F16, {2, 1, 4, 16}), out16(DType::F16, {2, 1, 4, 16});
  HostTensor k16(DType::F16, {3, 10, 2, 16}), v16(DType::F16, {3, 10, 2, 16});
  p.q = q16.view();
  p.out = out16.view();
  p.k_cache = k16.view();
  p.v_cache = v16.view();
  p.k_new = p.v_new = {};
  EXPECT_INVALID(build(), "q_descale", "is only for float8_e4m3fn inputs (q is float16");
}

// ---------------------------------------------------------------------------------------------
// No CUDA kernel sees fp8 yet: fake device pointers (never dereferenced; the call is refused
// before any launch, also on a machine with a GPU).
// ---------------------------------------------------------------------------------------------
void* fake_device_pointer(uintptr_t offset) { return reinterpret_cast<void*>(uintptr_t(1) << 40 | offset); }

TEST(Fp8Backends, GpuBackendsRefuseFp8) {
  FwdParams p;
  p.q = TensorView::contiguous(fake_device_pointer(0x0000), DType::F8E4M3, {2, 5, 4, 16}, DeviceType::Cuda);
  p.k = TensorView::contiguous(fake_device_pointer(0x1000), DType::F8E4M3, {2, 7, 2, 16}, DeviceType::Cuda);
  p.v = TensorView::contiguous(fake_device_pointer(0x2000), DType::F8E4M3, {2, 7, 2, 16}, DeviceType::Cuda);
  p.out = TensorView::contiguous(fake_device_pointer(0x3000), DType::BF16, {2, 5, 4, 16}, DeviceType::Cuda);
  p.k_descale = TensorView::contiguous(fake_device_pointer(0x4000), DType::F32, {2, 2}, DeviceType::Cuda);
  AttnProblem problem;
  ASSERT_TRUE(make_fwd_problem(p, &problem).ok());
  const DeviceInfo info = device_info(0);
  for (Backend b : {Backend::Auto, Backend::Fa2, Backend::Fa3}) {
    p.backend = b;
    const Status st = fwd(p);
    if (!info.cuda_built) {
      EXPECT_UNSUPPORTED(st, "backend", "not in this build") << backend_name(b);
    } else if (info.device < 0) {
      EXPECT_INVALID(st, "q", "must be on a visible CUDA device");
    } else if (b == Backend::Fa3 && info.sm_major != 9) {
      EXPECT_UNSUPPORTED(st, "backend", "fa3 needs an sm90 GPU");
    } else {
      EXPECT_UNSUPPORTED(st, "q", "float8_e4m3fn inputs run on the CPU backend only: the FA3 fp8 kernels are not "
                                  "built yet") << backend_name(b);
    }
  }
}

}  // namespace
}  // namespace flashattn::test
