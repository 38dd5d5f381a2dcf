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

KvRun::KvRun(const KvCase& c) : c_(c) {
  std::mt19937_64 rng(c.seed);
  const bool paged = c.page_size > 0;
  const int pages_per_seq = paged ? (c.capacity + c.page_size - 1) / c.page_size : 0;
  const int batch_cache = c.batch_idx ? c.batch + 2 : c.batch;
  const int num_blocks = paged ? c.batch * pages_per_seq + 3 : 0;

  q = HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.head_dim});
  q.fill_normal(rng);
  const std::vector<int64_t> cache_shape = paged ? std::vector<int64_t>{num_blocks, c.page_size, c.heads_k, c.head_dim}
                                                 : std::vector<int64_t>{batch_cache, c.capacity, c.heads_k, c.head_dim};
  std::vector<int64_t> v_cache_shape = cache_shape;
  v_cache_shape[3] = c.dv();
  k_cache = HostTensor(c.dtype, cache_shape);
  v_cache = HostTensor(c.dtype, v_cache_shape);
  k_cache.fill_normal(rng);
  v_cache.fill_normal(rng);
  if (c.seqlen_new > 0) {
    k_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, c.heads_k, c.head_dim});
    v_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, c.heads_k, c.dv()});
    k_new.fill_normal(rng);
    v_new.fill_normal(rng);
  }
  std::vector<int32_t> lens(static_cast<size_t>(c.batch));
  std::uniform_int_distribution<int> len_dist(0, c.capacity - c.seqlen_new);
  for (auto& l : lens) l = len_dist(rng);
  if (!lens.empty()) {
    lens[0] = 0;                              // an empty cache
    lens.back() = c.capacity - c.seqlen_new;  // a full one
  }
  if (!c.full_cache) cache_seqlens = int_tensor(lens);
  if (paged) {  // pages scattered in a random order
    std::vector<int32_t> pages(static_cast<size_t>(num_blocks));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    pages.resize(size_t(c.batch * pages_per_seq));
    block_table = HostTensor(DType::I32, {c.batch, pages_per_seq});
    std::copy(pages.begin(), pages.end(), block_table.as<int32_t>());
    if (c.unused_pages && !c.full_cache)
      for (int b = 0; b < c.batch; ++b)
        for (int p = (lens[size_t(b)] + c.seqlen_new + c.page_size - 1) / c.page_size; p < pages_per_seq; ++p)
          block_table.as<int32_t>()[b * pages_per_seq + p] = -1;
  }
  if (c.batch_idx) {
    std::vector<int32_t> idx(static_cast<size_t>(batch_cache));
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(size_t(c.batch));
    batch_index = int_tensor(idx);
  }
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
  if (c.alibi == 1) {
    slopes = HostTensor(DType::F32, {c.heads_q});
    slopes.fill_uniform(rng, 0.05f, 0.5f);
  } else if (c.alibi == 2) {
    slopes = HostTensor(DType::F32, {c.batch, c.heads_q});
    slopes.fill_uniform(rng, 0.05f, 0.5f);
  }
  // Slots past each sequence's keys (cache_seqlens + appended) poisoned with NaN: a kernel that
  // reads one turns its row NaN.
  if (c.nan_past_cache && !c.full_cache)
    for (int b = 0; b < c.batch; ++b)
      for (int pos = lens[size_t(b)] + c.seqlen_new; pos < c.capacity; ++pos) {
        const int32_t page = paged ? block_table.as<int32_t>()[b * pages_per_seq + pos / c.page_size] : 0;
        if (page < 0) continue;  // an unused page: no slot
        // The cache row of (b, pos), in units of heads_k rows.
        const int64_t slot = paged ? int64_t(page) * c.page_size + pos % c.page_size
                                   : int64_t(c.batch_idx ? batch_index.as<int32_t>()[b] : b) * c.capacity + pos;
        for (int64_t e = 0; e < int64_t(c.heads_k) * c.head_dim; ++e) k_cache.set(slot * c.heads_k * c.head_dim + e, std::nanf(""));
        for (int64_t e = 0; e < int64_t(c.heads_k) * c.dv(); ++e) v_cache.set(slot * c.heads_k * c.dv() + e, std::nanf(""));
      }
  // fp8: a distinct factor per (batch entry, kv head), drawn from their own stream.
  if (c.dtype == DType::F8E4M3) {
    std::mt19937_64 descale_rng(c.seed ^ 0xfb8ull);
    for (HostTensor& d : descales) {
      d = HostTensor(DType::F32, {c.batch, c.heads_k});
      d.fill_uniform(descale_rng, 0.25f, 2.f);
    }
  }
}

KvCacheParams KvRun::params(const HostTensor& kc, const HostTensor& vc, TensorView out, TensorView lse,
                            Backend backend) const {
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
  p.rotary_interleaved = c_.interleaved;
  p.causal = c_.causal;
  p.window_left = c_.window_left;
  p.window_right = c_.window_right;
  p.softcap = c_.softcap;
  p.alibi_slopes = slopes.view();
  p.softmax_scale = c_.softmax_scale;
  p.num_splits = c_.num_splits;
  p.out = out;
  p.softmax_lse = lse;
  p.q_descale = descales[0].view();
  p.k_descale = descales[1].view();
  p.v_descale = descales[2].view();
  p.backend = backend;
  return p;
}

std::vector<int64_t> KvRun::out_shape() const { return {c_.batch, c_.seqlen_q, c_.heads_q, c_.dv()}; }
std::vector<int64_t> KvRun::lse_shape() const { return {c_.batch, c_.heads_q, c_.seqlen_q}; }

namespace {

// max_abs_diff where NaN matches NaN: caches poisoned past their keys (KvCase::nan_past_cache).
double cache_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    worst = std::max(worst, max_abs_diff({a[i]}, {b[i]}));
  }
  return worst;
}

}  // namespace

void check_kvcache_case(const KvCase& c, Backend backend, const KvRunner& runner) {
  SCOPED_TRACE(c.name());
  const KvRun run(c);
  const HostTensor& k_cache = run.k_cache;
  const HostTensor& v_cache = run.v_cache;
  auto params = [&](HostTensor& kc, HostTensor& vc, TensorView out, TensorView lse) {
    return run.params(kc, vc, out, lse, backend);
  };

  // Each run works on its own copy of the cache, since the call appends into it.
  HostTensor k_fast = k_cache, v_fast = v_cache;
  const DType out_dtype = run.out_dtype();
  HostTensor out(out_dtype, run.out_shape()), lse(DType::F32, run.lse_shape());
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
  if (c.nan_past_cache) {  // the poison is there, and out of every reader's sight
    const auto is_nan = [](float x) { return std::isnan(x); };
    const std::vector<float> poisoned = k_cache.to_float();
    EXPECT_TRUE(std::any_of(poisoned.begin(), poisoned.end(), is_nan)) << "no slot poisoned";
    EXPECT_TRUE(std::none_of(r.begin(), r.end(), is_nan)) << "the reference read a poisoned slot";
  }
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
  const auto diff = c.nan_past_cache ? cache_diff : max_abs_diff;
  EXPECT_LE(diff(kf, kr), rounding_floor(c.dtype, max_abs(kr)));
  EXPECT_EQ(diff(v_fast.to_float(), v64.to_float()), 0.0);
  if (c.seqlen_new == 0) {
    EXPECT_EQ(diff(kf, k0), 0.0) << "no k_new, yet the cache changed";
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
  // d256: on sm90 the FA2 forward runs 128 x 64 tiles with 8 warps there (fa2/fwd_plan.h), paged
  // with split-KV and dense decode with automatic splits.
  add([](KvCase& c) { c.head_dim = 256; c.page_size = 16; c.seqlen_new = 4; c.seqlen_q = 4; c.causal = true; c.num_splits = 3; });
  add([](KvCase& c) { c.head_dim = 256; c.heads_q = 8; c.heads_k = 1; c.seqlen_new = 1; });
  return cases;
}

// Speculative decoding: seqlen_q 2..16 new tokens (appended to the cache, or not) x GQA 1/4/8/16,
// causal (bottom-right: token i sees keys up to cache + i), a left window, ALiBi, softcap, a
// non-causal window, split-KV 1/2/5/automatic, dense / paged (pages of 16 and 7) caches whose
// slots past each sequence's keys are NaN; head dims 64, 128, 256 and a padded 96; then a few
// shapes of their own (more rows than a tile, a batch index, unused pages).
std::vector<KvCase> speculative_kv_cases() {
  std::vector<KvCase> cases;
  int i = 0;
  for (int sq : {2, 3, 4, 5, 7, 8, 12, 16})
    for (int group : {1, 4, 8, 16}) {
      KvCase c;
      c.batch = 3;
      c.seqlen_q = sq;
      c.seqlen_new = i % 3 == 2 ? 0 : sq;
      c.heads_k = 2;
      c.heads_q = 2 * group;
      c.capacity = 200 + 31 * (i % 5);
      c.head_dim = i % 4 == 0 ? 64 : i % 4 == 1 ? 128 : i % 4 == 2 ? 256 : 96;
      c.causal = i % 5 != 4;
      if (i % 5 == 1) c.window_left = 40;
      if (i % 5 == 2) c.alibi = 1 + i % 2;
      if (i % 5 == 3) c.softcap = 15.f;
      if (i % 5 == 4) {
        c.window_left = 30;
        c.window_right = 3;
      }
      const int split_choice = (i + i / 4) % 4;  // not in step with the head dim
      c.num_splits = split_choice == 0 ? 1 : split_choice == 1 ? 2 : split_choice == 2 ? 5 : 0;  // 0: automatic
      c.page_size = (i / 2) % 3 == 0 ? 0 : (i / 2) % 3 == 1 ? 16 : 7;
      c.nan_past_cache = true;
      c.dtype = i % 2 == 0 ? DType::BF16 : DType::F16;
      cases.push_back(c);
      ++i;
    }
  auto add = [&](auto f) {
    KvCase c;
    c.seqlen_q = c.seqlen_new = 16;
    c.heads_q = 32;
    c.heads_k = 2;  // 256 rows per KV head: several row blocks
    c.causal = true;
    c.nan_past_cache = true;
    f(c);
    cases.push_back(c);
  };
  add([](KvCase&) {});
  add([](KvCase& c) { c.head_dim = 128; c.softcap = 10.f; c.num_splits = 3; });
  add([](KvCase& c) { c.head_dim = 128; c.seqlen_q = c.seqlen_new = 6; c.heads_q = 14; c.batch_idx = true; });  // G = 7
  add([](KvCase& c) { c.seqlen_q = c.seqlen_new = 4; c.heads_q = 24; c.page_size = 16; c.unused_pages = true; c.alibi = 2; });
  add([](KvCase& c) { c.seqlen_q = 3; c.seqlen_new = 3; c.heads_q = 8; c.rotary_dim = 64; c.num_splits = 0; });
  add([](KvCase& c) { c.seqlen_q = 5; c.seqlen_new = 0; c.heads_q = 16; c.full_cache = true; c.capacity = 100; c.nan_past_cache = false; });
  for (size_t j = 0; j < cases.size(); ++j) cases[j].seed = 2000 + j;
  return cases;
}

}  // namespace flashattn::test
