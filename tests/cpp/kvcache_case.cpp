#include "kvcache_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "api/validate.h"
#include "attention_case.h"
#include "cpu/reference.h"
#include "test_util.h"

namespace flashattn::test {

void check_kvcache_case(const KvCase& c, Backend backend, const KvRunner& runner) {
  SCOPED_TRACE(c.name());
  std::mt19937_64 rng(c.seed);
  const bool paged = c.page_size > 0;
  const int pages_per_seq = paged ? (c.capacity + c.page_size - 1) / c.page_size : 0;
  const int batch_cache = c.batch_idx ? c.batch + 2 : c.batch;
  const int num_blocks = paged ? c.batch * pages_per_seq + 3 : 0;

  HostTensor q(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.head_dim});
  q.fill_normal(rng);
  const std::vector<int64_t> cache_shape = paged ? std::vector<int64_t>{num_blocks, c.page_size, c.heads_k, c.head_dim}
                                                 : std::vector<int64_t>{batch_cache, c.capacity, c.heads_k, c.head_dim};
  HostTensor k_cache(c.dtype, cache_shape), v_cache(c.dtype, cache_shape);
  k_cache.fill_normal(rng);
  v_cache.fill_normal(rng);
  HostTensor k_new, v_new;
  if (c.seqlen_new > 0) {
    k_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, c.heads_k, c.head_dim});
    v_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, c.heads_k, c.head_dim});
    k_new.fill_normal(rng);
    v_new.fill_normal(rng);
  }
  std::vector<int32_t> lens(static_cast<size_t>(c.batch));
  std::uniform_int_distribution<int> len_dist(0, c.capacity - c.seqlen_new);
  for (auto& l : lens) l = len_dist(rng);
  lens[0] = 0;                              // an empty cache
  lens.back() = c.capacity - c.seqlen_new;  // a full one
  HostTensor cache_seqlens = c.full_cache ? HostTensor() : int_tensor(lens);
  HostTensor block_table, batch_index;
  if (paged) {  // pages scattered in a random order
    std::vector<int32_t> pages(static_cast<size_t>(num_blocks));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    pages.resize(size_t(c.batch * pages_per_seq));
    block_table = HostTensor(DType::I32, {c.batch, pages_per_seq});
    std::copy(pages.begin(), pages.end(), block_table.as<int32_t>());
  }
  if (c.batch_idx) {
    std::vector<int32_t> idx(static_cast<size_t>(batch_cache));
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(size_t(c.batch));
    batch_index = int_tensor(idx);
  }
  HostTensor cos, sin;
  if (c.rotary_dim > 0) {
    cos = HostTensor(c.dtype, {c.capacity + c.seqlen_q, c.rotary_dim / 2});
    sin = HostTensor(c.dtype, {c.capacity + c.seqlen_q, c.rotary_dim / 2});
    for (int pos = 0; pos < c.capacity + c.seqlen_q; ++pos)
      for (int i = 0; i < c.rotary_dim / 2; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * i / c.rotary_dim);
        cos.set(pos * (c.rotary_dim / 2) + i, float(std::cos(angle)));
        sin.set(pos * (c.rotary_dim / 2) + i, float(std::sin(angle)));
      }
  }
  HostTensor slopes;
  // fp8: a distinct factor per (batch entry, kv head), drawn from their own stream.
  HostTensor descales[3];
  if (c.dtype == DType::F8E4M3) {
    std::mt19937_64 descale_rng(c.seed ^ 0xfb8ull);
    for (HostTensor& d : descales) {
      d = HostTensor(DType::F32, {c.batch, c.heads_k});
      d.fill_uniform(descale_rng, 0.25f, 2.f);
    }
  }
  const DType out_dtype = c.dtype == DType::F8E4M3 ? DType::BF16 : c.dtype;

  auto params = [&](HostTensor& kc, HostTensor& vc, TensorView out, TensorView lse) {
    KvCacheParams p;
    p.q = q.view();
    p.k_cache = kc.view();
    p.v_cache = vc.view();
    p.k_new = k_new.view();
    p.v_new = v_new.view();
    p.cache_seqlens = cache_seqlens.view();
    p.cache_batch_idx = batch_index.view();
    p.block_table = block_table.view();
    p.rotary_cos = cos.view();
    p.rotary_sin = sin.view();
    p.rotary_interleaved = c.interleaved;
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.softcap = c.softcap;
    p.num_splits = c.num_splits;
    p.out = out;
    p.softmax_lse = lse;
    p.q_descale = descales[0].view();
    p.k_descale = descales[1].view();
    p.v_descale = descales[2].view();
    p.backend = backend;
    return p;
  };

  // Each run works on its own copy of the cache, since the call appends into it.
  HostTensor k_fast = k_cache, v_fast = v_cache;
  HostTensor out(out_dtype, {c.batch, c.seqlen_q, c.heads_q, c.head_dim}), lse(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
  out.poison();
  lse.poison();
  const KvCacheParams fast_params = params(k_fast, v_fast, out.view(), lse.view());
  const Status st = runner ? runner(fast_params) : fwd_kvcache(fast_params);
  ASSERT_TRUE(st.ok()) << st.message();

  HostTensor k64 = k_cache, v64 = v_cache, klp = k_cache, vlp = v_cache;
  HostTensor out64(DType::F32, out.shape()), lse64(DType::F32, lse.shape());
  HostTensor out_lp(out_dtype, out.shape()), lse_lp(DType::F32, lse.shape());
  for (auto [kc, vc, o, l, precision] :
       {std::tuple{&k64, &v64, &out64, &lse64, cpu::reference::Precision::Float64},
        std::tuple{&klp, &vlp, &out_lp, &lse_lp, cpu::reference::Precision::InputPrecision}}) {
    KvCacheProblem problem;
    KvCacheParams ref_params = params(*kc, *vc, o->view(), l->view());
    ref_params.backend = Backend::Cpu;
    const Status built = api::make_kvcache_problem(ref_params, &problem,
                                                   {.allow_f32_outputs = true});
    ASSERT_TRUE(built.ok()) << built.message();
    cpu::reference::fwd_kvcache(problem, precision);
  }

  const std::vector<float> r = out64.to_float();
  const double err = max_abs_diff(out.to_float(), r), err_lp = max_abs_diff(out_lp.to_float(), r);
  EXPECT_LE(err, 2 * err_lp + rounding_floor(out_dtype, max_abs(r))) << "out: " << err << " vs " << err_lp;
  // fp8 on the CPU backend is the fp8 kernels' oracle: P unrounded, so within the output's rounding
  // (the reference that rounds P to fp8, as the kernels will, is far looser).
  if (c.dtype == DType::F8E4M3 && backend == Backend::Cpu)
    EXPECT_LE(err, 1.25 * rounding_floor(out_dtype, max_abs(r))) << "fp8 out: " << err;
  const std::vector<float> rl = lse64.to_float();
  const double lerr = max_abs_diff(lse.to_float(), rl), lerr_lp = max_abs_diff(lse_lp.to_float(), rl);
  EXPECT_LE(lerr, 2 * lerr_lp + 1e-5 * std::max(1.0, max_abs(rl))) << "lse: " << lerr << " vs " << lerr_lp;
  // The appended (and rotated) keys land in the same slots as the reference's, within one
  // rounding of the stored dtype; every other slot is untouched.
  const std::vector<float> kf = k_fast.to_float(), kr = k64.to_float(), k0 = k_cache.to_float();
  EXPECT_LE(max_abs_diff(kf, kr), rounding_floor(c.dtype, max_abs(kr)));
  EXPECT_EQ(max_abs_diff(v_fast.to_float(), v64.to_float()), 0.0);
  if (c.seqlen_new == 0) {
    EXPECT_EQ(max_abs_diff(kf, k0), 0.0) << "no k_new, yet the cache changed";
  }
}

std::vector<KvCase> kv_cases() {
  std::vector<KvCase> cases;
  auto add = [&](auto f) {
    KvCase c;
    f(c);
    c.seed = cases.size() + 11;
    cases.push_back(c);
  };
  add([](KvCase&) {});                                              // decode, dense
  add([](KvCase& c) { c.num_splits = 1; });
  add([](KvCase& c) { c.num_splits = 5; });
  add([](KvCase& c) { c.seqlen_new = 1; });
  add([](KvCase& c) { c.seqlen_new = 4; c.seqlen_q = 4; c.causal = true; });
  add([](KvCase& c) { c.page_size = 16; });
  add([](KvCase& c) { c.page_size = 7; c.seqlen_new = 3; c.seqlen_q = 3; c.causal = true; });
  add([](KvCase& c) { c.page_size = 256; c.capacity = 600; c.seqlen_new = 2; c.seqlen_q = 2; });
  add([](KvCase& c) { c.page_size = 1; c.capacity = 40; c.seqlen_new = 1; });
  add([](KvCase& c) { c.rotary_dim = 64; c.seqlen_new = 2; c.seqlen_q = 2; c.causal = true; });
  add([](KvCase& c) { c.rotary_dim = 32; c.interleaved = true; c.seqlen_new = 3; c.seqlen_q = 3; });
  add([](KvCase& c) { c.rotary_dim = 16; c.seqlen_new = 1; c.page_size = 32; c.interleaved = true; c.causal = true; });
  add([](KvCase& c) { c.batch_idx = true; c.seqlen_new = 2; c.seqlen_q = 2; c.causal = true; });
  add([](KvCase& c) { c.window_left = 50; c.causal = true; c.seqlen_q = 5; c.seqlen_new = 5; c.rotary_dim = 64; });
  add([](KvCase& c) { c.full_cache = true; c.capacity = 100; });
  add([](KvCase& c) { c.full_cache = true; c.page_size = 10; c.capacity = 100; c.softcap = 3.f; });
  add([](KvCase& c) { c.heads_q = c.heads_k = 4; c.head_dim = 128; c.seqlen_q = 16; c.causal = true; });
  add([](KvCase& c) { c.heads_q = 8; c.heads_k = 1; c.dtype = DType::F16; c.seqlen_new = 1; });
  add([](KvCase& c) { c.dtype = DType::F32; c.page_size = 64; c.seqlen_new = 8; c.seqlen_q = 8; c.causal = true; });
  // Head dims whose 16-byte chunks per row do not divide the GPU loader's threads, paged.
  add([](KvCase& c) { c.head_dim = 96; c.page_size = 16; c.seqlen_new = 3; c.seqlen_q = 3; c.causal = true; });
  add([](KvCase& c) { c.head_dim = 160; c.page_size = 7; c.seqlen_new = 2; c.seqlen_q = 2; });
  // d256: on sm90 the FA2 forward runs 128 x 64 tiles with 8 warps there (fa2/fwd_launch.cu), paged
  // with split-KV and dense decode with automatic splits.
  add([](KvCase& c) { c.head_dim = 256; c.page_size = 16; c.seqlen_new = 4; c.seqlen_q = 4; c.causal = true; c.num_splits = 3; });
  add([](KvCase& c) { c.head_dim = 256; c.heads_q = 8; c.heads_k = 1; c.seqlen_new = 1; });
  return cases;
}

}  // namespace flashattn::test
