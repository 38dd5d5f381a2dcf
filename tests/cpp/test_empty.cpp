// Empty problems: batch 0, seqlen_q 0, seqlen_k 0 (and their varlen, KV-cache and combine forms)
// on every entry point. Empty tensors come as numpy passes them (every stride 0, here also a null
// pointer); the call succeeds, rows that see no key get out 0 and LSE -inf, gradients of keys
// without queries (and of queries without keys) are 0.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace flashattn::test {
namespace {

// A view of shape `shape` that has no elements, described as numpy describes one.
TensorView empty_view(DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v = TensorView::contiguous(nullptr, dtype, shape);
  for (int d = 0; d < v.ndim; ++d) v.stride[d] = 0;
  return v;
}

// A host tensor of `shape` (with elements) filled with N(0, 1).
HostTensor random_tensor(DType dtype, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t(dtype, std::move(shape));
  std::mt19937_64 rng(seed);
  t.fill_normal(rng);
  return t;
}

void expect_all(const HostTensor& t, float value, const char* what) {
  const std::vector<float> x = t.to_float();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], value) << what << "[" << i << "]";
}

constexpr DType kType = DType::BF16;
constexpr int64_t kBatch = 2, kSeq = 70, kHeadsQ = 4, kHeadsK = 2, kDim = 64;

TEST(EmptyProblems, ForwardWithoutBatchOrQueries) {
  HostTensor k = random_tensor(kType, {kBatch, kSeq, kHeadsK, kDim}, 1), v = k;
  for (bool no_batch : {true, false}) {
    SCOPED_TRACE(no_batch ? "batch 0" : "seqlen_q 0");
    const int64_t b = no_batch ? 0 : kBatch;
    FwdParams p;
    p.q = empty_view(kType, {b, 0, kHeadsQ, kDim});
    p.out = empty_view(kType, {b, 0, kHeadsQ, kDim});
    p.softmax_lse = empty_view(DType::F32, {b, kHeadsQ, 0});
    if (no_batch) {
      p.q.shape[1] = p.out.shape[1] = p.softmax_lse.shape[2] = kSeq;  // batch alone makes it empty
      p.k = empty_view(kType, {0, kSeq, kHeadsK, kDim});
      p.v = empty_view(kType, {0, kSeq, kHeadsK, kDim});
    } else {
      p.k = k.view();
      p.v = v.view();
    }
    p.causal = true;
    const Status st = fwd(p);
    EXPECT_TRUE(st.ok()) << st.message();
  }
}

TEST(EmptyProblems, ForwardWithoutKeysGivesZeroAndMinusInf) {
  HostTensor q = random_tensor(kType, {kBatch, kSeq, kHeadsQ, kDim}, 2);
  HostTensor slopes = random_tensor(DType::F32, {kHeadsQ}, 3);
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    HostTensor out(kType, {kBatch, kSeq, kHeadsQ, kDim}), lse(DType::F32, {kBatch, kHeadsQ, kSeq});
    out.poison();
    lse.poison();
    FwdParams p;
    p.q = q.view();
    p.k = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
    p.v = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.causal = variant == 1;
    if (variant == 2) {
      p.num_splits = 3;
      p.alibi_slopes = slopes.view();
    }
    if (variant == 3) {
      p.num_splits = 0;
      p.dropout_p = 0.2f;
      p.window_left = 4;
    }
    const Status st = fwd(p);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_all(out, 0.f, "out");
    expect_all(lse, -INFINITY, "lse");
  }
}

TEST(EmptyProblems, VarlenWithoutRowsOrKeys) {
  HostTensor rows = random_tensor(kType, {kSeq, kHeadsQ, kDim}, 4), keys = random_tensor(kType, {kSeq, kHeadsK, kDim}, 5);
  HostTensor cu = int_tensor({0, 30, kSeq}), cu_zero = int_tensor({0, 0, 0});
  {  // no keys in any sequence
    HostTensor out(kType, {kSeq, kHeadsQ, kDim}), lse(DType::F32, {kHeadsQ, kSeq});
    out.poison();
    lse.poison();
    FwdParams p;
    p.q = rows.view();
    p.k = empty_view(kType, {0, kHeadsK, kDim});
    p.v = empty_view(kType, {0, kHeadsK, kDim});
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.cu_seqlens_q = cu.view();
    p.cu_seqlens_k = cu_zero.view();
    p.causal = true;
    const Status st = fwd(p);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_all(out, 0.f, "out");
    expect_all(lse, -INFINITY, "lse");
  }
  {  // no query rows
    FwdParams p;
    p.q = empty_view(kType, {0, kHeadsQ, kDim});
    p.k = keys.view();
    p.v = keys.view();
    p.out = empty_view(kType, {0, kHeadsQ, kDim});
    p.softmax_lse = empty_view(DType::F32, {kHeadsQ, 0});
    p.cu_seqlens_q = cu_zero.view();
    p.cu_seqlens_k = cu.view();
    const Status st = fwd(p);
    EXPECT_TRUE(st.ok()) << st.message();
  }
}

// Backward: without keys dq is 0; without queries dk and dv are 0; without a batch nothing runs.
TEST(EmptyProblems, Backward) {
  HostTensor full_q = random_tensor(kType, {kBatch, kSeq, kHeadsQ, kDim}, 6);
  HostTensor full_k = random_tensor(kType, {kBatch, kSeq, kHeadsK, kDim}, 7);
  for (int which = 0; which < 3; ++which) {
    const bool no_keys = which == 0, no_queries = which == 1, no_batch = which == 2;
    SCOPED_TRACE(no_keys ? "seqlen_k 0" : no_queries ? "seqlen_q 0" : "batch 0");
    const int64_t b = no_batch ? 0 : kBatch;
    const int64_t sq = no_queries ? 0 : kSeq, sk = no_keys ? 0 : kSeq;
    auto q_like = [&](HostTensor& t) { return sq == 0 || b == 0 ? empty_view(kType, {b, sq, kHeadsQ, kDim}) : t.view(); };
    auto k_like = [&](HostTensor& t) { return sk == 0 || b == 0 ? empty_view(kType, {b, sk, kHeadsK, kDim}) : t.view(); };
    HostTensor out(kType, {kBatch, kSeq, kHeadsQ, kDim}), lse(DType::F32, {kBatch, kHeadsQ, kSeq});
    HostTensor dout = random_tensor(kType, {kBatch, kSeq, kHeadsQ, kDim}, 8);
    HostTensor dq(kType, full_q.shape()), dk(kType, full_k.shape()), dv(kType, full_k.shape());
    dq.poison();
    dk.poison();
    dv.poison();

    FwdParams f;
    f.q = q_like(full_q);
    f.k = k_like(full_k);
    f.v = k_like(full_k);
    f.out = q_like(out);
    f.softmax_lse = sq == 0 || b == 0 ? empty_view(DType::F32, {b, kHeadsQ, sq}) : lse.view();
    f.causal = true;
    Status st = fwd(f);
    ASSERT_TRUE(st.ok()) << st.message();

    BwdParams g;
    g.q = f.q;
    g.k = f.k;
    g.v = f.v;
    g.out = f.out;
    g.softmax_lse = f.softmax_lse;
    g.causal = true;
    g.dout = q_like(dout);
    g.dq = q_like(dq);
    g.dk = k_like(dk);
    g.dv = k_like(dv);
    st = bwd(g);
    ASSERT_TRUE(st.ok()) << st.message();
    if (no_keys) expect_all(dq, 0.f, "dq");
    if (no_queries) {
      expect_all(dk, 0.f, "dk");
      expect_all(dv, 0.f, "dv");
    }
  }
}

TEST(EmptyProblems, KvCache) {
  HostTensor q = random_tensor(kType, {kBatch, 1, kHeadsQ, kDim}, 9);
  HostTensor k_new = random_tensor(kType, {kBatch, 1, kHeadsK, kDim}, 10), v_new = k_new;
  HostTensor lens = int_tensor({3, 5});
  {  // batch 0
    KvCacheParams p;
    p.q = empty_view(kType, {0, 1, kHeadsQ, kDim});
    p.k_cache = empty_view(kType, {0, 10, kHeadsK, kDim});
    p.v_cache = empty_view(kType, {0, 10, kHeadsK, kDim});
    p.k_new = empty_view(kType, {0, 1, kHeadsK, kDim});
    p.v_new = empty_view(kType, {0, 1, kHeadsK, kDim});
    p.cache_seqlens = empty_view(DType::I32, {0});
    p.out = empty_view(kType, {0, 1, kHeadsQ, kDim});
    const Status st = fwd_kvcache(p);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  {  // no query rows: the new keys are still appended
    HostTensor k_cache(kType, {kBatch, 10, kHeadsK, kDim}), v_cache(k_cache);
    KvCacheParams p;
    p.q = empty_view(kType, {kBatch, 0, kHeadsQ, kDim});
    p.k_cache = k_cache.view();
    p.v_cache = v_cache.view();
    p.k_new = k_new.view();
    p.v_new = v_new.view();
    p.cache_seqlens = lens.view();
    p.out = empty_view(kType, {kBatch, 0, kHeadsQ, kDim});
    p.softmax_lse = empty_view(DType::F32, {kBatch, kHeadsQ, 0});
    const Status st = fwd_kvcache(p);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(k_cache.get(((1 * 10 + 5) * kHeadsK + 1) * kDim + 3), k_new.get((1 * kHeadsK + 1) * kDim + 3));
  }
  HostTensor pages = random_tensor(kType, {3, 16, kHeadsK, kDim}, 11);
  for (int variant = 0; variant < 3; ++variant) {  // no keys: an empty cache, or no pages
    SCOPED_TRACE("variant " + std::to_string(variant));
    HostTensor out(kType, {kBatch, 1, kHeadsQ, kDim}), lse(DType::F32, {kBatch, kHeadsQ, 1});
    out.poison();
    lse.poison();
    KvCacheParams p;
    p.q = q.view();
    p.out = out.view();
    p.softmax_lse = lse.view();
    p.causal = true;
    if (variant < 2) {
      p.k_cache = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
      p.v_cache = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
      p.num_splits = variant == 0 ? 0 : 4;
    } else {
      p.k_cache = pages.view();
      p.v_cache = pages.view();
      p.block_table = empty_view(DType::I32, {kBatch, 0});
    }
    const Status st = fwd_kvcache(p);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_all(out, 0.f, "out");
    expect_all(lse, -INFINITY, "lse");
  }
  {  // no new keys (k_new with seqlen_new 0): attention over the cache as it is
    HostTensor k_cache = random_tensor(kType, {kBatch, 10, kHeadsK, kDim}, 12), v_cache = k_cache;
    HostTensor out(kType, {kBatch, 1, kHeadsQ, kDim}), expected(kType, {kBatch, 1, kHeadsQ, kDim});
    KvCacheParams p;
    p.q = q.view();
    p.k_cache = k_cache.view();
    p.v_cache = v_cache.view();
    p.cache_seqlens = lens.view();
    p.out = expected.view();
    ASSERT_TRUE(fwd_kvcache(p).ok());
    p.k_new = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
    p.v_new = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
    p.out = out.view();
    const Status st = fwd_kvcache(p);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(out.to_float(), expected.to_float());
  }
}

TEST(EmptyProblems, Combine) {
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE(which == 0 ? "batch 0" : which == 1 ? "seqlen 0" : "varlen total 0");
    CombineParams p;
    if (which < 2) {
      const int64_t b = which == 0 ? 0 : kBatch, s = which == 0 ? kSeq : 0;
      p.out_partial = empty_view(DType::F32, {3, b, s, kHeadsQ, kDim});
      p.lse_partial = empty_view(DType::F32, {3, b, kHeadsQ, s});
      p.out = empty_view(kType, {b, s, kHeadsQ, kDim});
      p.softmax_lse = empty_view(DType::F32, {b, kHeadsQ, s});
    } else {
      p.out_partial = empty_view(DType::F32, {3, 0, kHeadsQ, kDim});
      p.lse_partial = empty_view(DType::F32, {3, kHeadsQ, 0});
      p.out = empty_view(kType, {0, kHeadsQ, kDim});
      p.softmax_lse = empty_view(DType::F32, {kHeadsQ, 0});
    }
    const Status st = combine(p);
    EXPECT_TRUE(st.ok()) << st.message();
  }
}

// Layout rules still apply to tensors with elements.
TEST(EmptyProblems, StridesOfTensorsWithElementsAreStillChecked) {
  HostTensor q = random_tensor(kType, {kBatch, kSeq, kHeadsQ, kDim}, 13), out(q);
  FwdParams p;
  p.q = q.view();
  p.k = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
  p.v = empty_view(kType, {kBatch, 0, kHeadsK, kDim});
  p.out = out.view();
  p.out.stride[3] = 0;
  const Status st = fwd(p);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.argument(), "out");
  EXPECT_NE(st.message().find("the last dimension must be contiguous"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace flashattn::test
