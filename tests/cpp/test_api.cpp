// The small API types (TensorView, Status, names, version, device_info) and the wiring of the
// entry points to the CPU backend, on cases whose answer is known exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.h"

namespace flashattn::test {
namespace {

TEST(TensorView, ContiguousViews) {
  float buffer[24];
  const TensorView t = TensorView::contiguous(buffer, DType::F32, {2, 3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_EQ(t.stride[1], 4);
  EXPECT_EQ(t.stride[2], 1);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.device, DeviceType::Cpu);
  const TensorView g = TensorView::contiguous(buffer, DType::F16, {4}, DeviceType::Cuda, 3);
  EXPECT_EQ(g.device, DeviceType::Cuda);
  EXPECT_EQ(g.device_index, 3);
}

TEST(TensorView, StridedViewsAndContiguity) {
  float buffer[64];
  EXPECT_FALSE(TensorView::strided(buffer, DType::F32, {2, 3}, {1, 2}).is_contiguous());  // transposed
  EXPECT_FALSE(TensorView::strided(buffer, DType::F32, {2, 3}, {4, 1}).is_contiguous());  // padded rows
  EXPECT_TRUE(TensorView::strided(buffer, DType::F32, {2, 3}, {3, 1}).is_contiguous());
  // Extent-1 dimensions never move the address: their strides do not matter.
  EXPECT_TRUE(TensorView::strided(buffer, DType::F32, {1, 3, 1}, {99, 1, 7}).is_contiguous());
  // No elements: trivially contiguous.
  EXPECT_TRUE(TensorView::strided(buffer, DType::F32, {0, 3}, {5, 5}).is_contiguous());
  EXPECT_EQ(TensorView::strided(buffer, DType::F32, {0, 3}, {5, 5}).numel(), 0);
}

TEST(TensorView, UndefinedAndMalformedViews) {
  const TensorView none;
  EXPECT_FALSE(none.defined());
  EXPECT_EQ(none.numel(), 0);
  // More than kMaxDims dimensions or mismatched stride lists are kept as malformed views that
  // validation rejects, never written past the arrays.
  const TensorView six = TensorView::contiguous(nullptr, DType::F32, {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(six.ndim, 6);
  EXPECT_EQ(six.numel(), 0);
  EXPECT_FALSE(six.is_contiguous());
  const TensorView mismatched = TensorView::strided(nullptr, DType::F32, {2, 3}, {1});
  EXPECT_EQ(mismatched.ndim, -1);
  EXPECT_FALSE(mismatched.defined());
  // An element count beyond int64 saturates instead of overflowing.
  const TensorView huge = TensorView::contiguous(nullptr, DType::F32, {int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_EQ(huge.numel(), INT64_MAX);
}

TEST(Names, DtypesAndBackends) {
  EXPECT_STREQ(dtype_name(DType::F32), "float32");
  EXPECT_STREQ(dtype_name(DType::F16), "float16");
  EXPECT_STREQ(dtype_name(DType::BF16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::F8E4M3), "float8_e4m3fn");
  EXPECT_STREQ(dtype_name(DType::I32), "int32");
  EXPECT_STREQ(dtype_name(DType::U8), "uint8");
  EXPECT_STREQ(dtype_name(static_cast<DType>(99)), "unknown");
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  EXPECT_EQ(dtype_size(static_cast<DType>(99)), 0u);
  EXPECT_STREQ(backend_name(Backend::Auto), "auto");
  EXPECT_STREQ(backend_name(Backend::Cpu), "cpu");
  EXPECT_STREQ(backend_name(Backend::Fa2), "fa2");
  EXPECT_STREQ(backend_name(Backend::Fa3), "fa3");
  EXPECT_STREQ(version(), "0.1.0");
}

TEST(StatusTest, OkAndErrors) {
  const Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_TRUE(bool(ok));
  EXPECT_EQ(ok.code(), ErrorCode::Ok);
  EXPECT_NO_THROW(ok.throw_if_error());

  const Status bad = Status::error(ErrorCode::InvalidArgument, "k", "argument 'k': broken, got 3");
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(bool(bad));
  EXPECT_EQ(bad.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(bad.argument(), "k");
  EXPECT_EQ(bad.message(), "argument 'k': broken, got 3");
  try {
    bad.throw_if_error();
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.argument(), "k");
    EXPECT_STREQ(e.what(), "argument 'k': broken, got 3");
  }
}

TEST(DeviceInfoTest, NeverFailsAndMatchesTheBuild) {
  const DeviceInfo info = device_info(0);
#if defined(FLASHATTN_WITH_CUDA)
  EXPECT_TRUE(info.cuda_built);
#else
  EXPECT_FALSE(info.cuda_built);
  EXPECT_EQ(info.device_count, 0);
#endif
  EXPECT_GE(info.device_count, 0);
  if (info.device_count == 0) {
    EXPECT_EQ(info.device, -1);
  }
  if (info.device >= 0) {
    EXPECT_FALSE(info.name.empty());
    EXPECT_GE(info.sm_major, 1);
    EXPECT_GT(info.multiprocessors, 0);
    EXPECT_GT(info.global_memory_bytes, 0u);
  }
  for (int bad : {-1, 1000}) {
    const DeviceInfo none = device_info(bad);
    EXPECT_EQ(none.device, -1);
    EXPECT_EQ(none.device_count, info.device_count);
  }
}

// ---------------------------------------------------------------------------------------------
// Entry points on the CPU backend, with answers known exactly.
// ---------------------------------------------------------------------------------------------

// One key per sequence: the softmax weight is 1, so out is that key's value row (per kv head),
// lse is its logit, and in the backward dq = dk = 0 while dv sums dout over the head group.
TEST(EntryPoints, SingleKeyForwardAndBackward) {
  const int64_t b = 2, sq = 3, hq = 4, hk = 2, d = 8;
  std::mt19937_64 rng(5);
  HostTensor q(DType::F32, {b, sq, hq, d}), k(DType::F32, {b, 1, hk, d}), v(DType::F32, {b, 1, hk, d});
  HostTensor out(DType::F32, {b, sq, hq, d}), lse(DType::F32, {b, hq, sq});
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  out.poison();
  lse.poison();
  FwdParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  p.softmax_lse = lse.view();
  const Status st = fwd(p);
  ASSERT_TRUE(st.ok()) << st.message();
  const float scale = 1.f / std::sqrt(float(d));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t kh = h / (hq / hk);
        float dot = 0;
        for (int64_t x = 0; x < d; ++x) {
          EXPECT_FLOAT_EQ(out.get(((bi * sq + i) * hq + h) * d + x), v.get((bi * hk + kh) * d + x));
          dot += q.get(((bi * sq + i) * hq + h) * d + x) * k.get((bi * hk + kh) * d + x);
        }
        EXPECT_NEAR(lse.get((bi * hq + h) * sq + i), dot * scale, 1e-5);
      }

  HostTensor dout(DType::F32, {b, sq, hq, d}), dq(DType::F32, {b, sq, hq, d}), dk(DType::F32, {b, 1, hk, d}),
      dv(DType::F32, {b, 1, hk, d});
  dout.fill_normal(rng);
  dq.poison();
  dk.poison();
  dv.poison();
  BwdParams g;
  g.q = q.view();
  g.k = k.view();
  g.v = v.view();
  g.out = out.view();
  g.dout = dout.view();
  g.softmax_lse = lse.view();
  g.dq = dq.view();
  g.dk = dk.view();
  g.dv = dv.view();
  const Status bst = bwd(g);
  ASSERT_TRUE(bst.ok()) << bst.message();
  for (int64_t i = 0; i < dq.numel(); ++i) EXPECT_NEAR(dq.get(i), 0.f, 1e-5);
  for (int64_t i = 0; i < dk.numel(); ++i) EXPECT_NEAR(dk.get(i), 0.f, 1e-5);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t kh = 0; kh < hk; ++kh)
      for (int64_t x = 0; x < d; ++x) {
        float sum = 0;
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t h = kh * (hq / hk); h < (kh + 1) * (hq / hk); ++h) sum += dout.get(((bi * sq + i) * hq + h) * d + x);
        EXPECT_NEAR(dv.get((bi * hk + kh) * d + x), sum, 1e-4);
      }
}

TEST(EntryPoints, KvCacheAppendsTheNewKeys) {
  const int64_t b = 2, cap = 6, hk = 1, d = 8;
  std::mt19937_64 rng(9);
  HostTensor q(DType::F32, {b, 1, 2, d}), k_cache(DType::F32, {b, cap, hk, d}), v_cache(DType::F32, {b, cap, hk, d});
  HostTensor k_new(DType::F32, {b, 2, hk, d}), v_new(DType::F32, {b, 2, hk, d}), out(DType::F32, {b, 1, 2, d});
  HostTensor lens = int_tensor({1, 4});
  for (HostTensor* t : {&q, &k_cache, &v_cache, &k_new, &v_new}) t->fill_normal(rng);
  KvCacheParams p;
  p.q = q.view();
  p.k_cache = k_cache.view();
  p.v_cache = v_cache.view();
  p.k_new = k_new.view();
  p.v_new = v_new.view();
  p.cache_seqlens = lens.view();
  p.out = out.view();
  const Status st = fwd_kvcache(p);
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t x = 0; x < d; ++x) {
        const int64_t slot = lens.as<int32_t>()[bi] + t;
        EXPECT_EQ(k_cache.get((bi * cap + slot) * d + x), k_new.get((bi * 2 + t) * d + x));
        EXPECT_EQ(v_cache.get((bi * cap + slot) * d + x), v_new.get((bi * 2 + t) * d + x));
      }
}

TEST(EntryPoints, CombineOfOneSplitIsACopy) {
  std::mt19937_64 rng(3);
  HostTensor out_partial(DType::F32, {1, 2, 3, 2, 8}), lse_partial(DType::F32, {1, 2, 2, 3});
  HostTensor out(DType::F32, {2, 3, 2, 8}), lse(DType::F32, {2, 2, 3});
  out_partial.fill_normal(rng);
  lse_partial.fill_normal(rng);
  CombineParams p;
  p.out_partial = out_partial.view();
  p.lse_partial = lse_partial.view();
  p.out = out.view();
  p.softmax_lse = lse.view();
  const Status st = combine(p);
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.get(i), out_partial.get(i), 1e-6);
  for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_NEAR(lse.get(i), lse_partial.get(i), 1e-6);
}

TEST(EntryPoints, DropoutMaskWithoutDropoutKeepsEverything) {
  HostTensor mask(DType::U8, {2, 2, 3, 5});
  std::memset(mask.data(), 7, size_t(mask.numel()));
  DropoutMaskParams p;
  p.mask = mask.view();
  p.dropout_p = 0.f;
  const Status st = dropout_mask(p);
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t i = 0; i < mask.numel(); ++i) EXPECT_EQ(mask.as<uint8_t>()[i], 1);
}

TEST(EntryPoints, ErrorsComeBackAsStatusNotExceptions) {
  FwdParams p;  // nothing given
  Status st;
  EXPECT_NO_THROW(st = fwd(p));
  EXPECT_EQ(st.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(st.argument(), "q");
  BwdParams g;
  EXPECT_NO_THROW(st = bwd(g));
  EXPECT_EQ(st.code(), ErrorCode::InvalidArgument);
  KvCacheParams kv;
  EXPECT_NO_THROW(st = fwd_kvcache(kv));
  EXPECT_EQ(st.code(), ErrorCode::InvalidArgument);
  CombineParams c;
  EXPECT_NO_THROW(st = combine(c));
  EXPECT_EQ(st.argument(), "out_partial");
}

}  // namespace
}  // namespace flashattn::test
