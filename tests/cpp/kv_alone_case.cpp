#include "kv_alone_case.h"

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
namespace {

// Rotary tables of `positions` rows starting at position `first` (the same angles at the same
// absolute positions, whatever the first row).
void fill_rotary(HostTensor& cos, HostTensor& sin, int first, int positions, int rotary_dim) {
  for (int pos = 0; pos < positions; ++pos)
    for (int i = 0; i < rotary_dim / 2; ++i) {
      const double angle = (first + pos) * std::pow(10000.0, -2.0 * i / rotary_dim);
      cos.set(pos * (rotary_dim / 2) + i, float(std::cos(angle)));
      sin.set(pos * (rotary_dim / 2) + i, float(std::sin(angle)));
    }
}

// Elements of one (position, kv head) slot of a dense (rows, heads, d) or paged cache.
struct CacheSlots {
  int page_size = 0, capacity = 0, heads = 0, dim = 0;
  const int32_t* table = nullptr;  // paged: (batch, pages_per_seq)
  int pages_per_seq = 0;
  int64_t element(int b, int pos, int h, int c) const {
    if (page_size == 0) return ((int64_t(b) * capacity + pos) * heads + h) * dim + c;
    const int64_t page = table[b * pages_per_seq + pos / page_size];
    return ((page * page_size + pos % page_size) * heads + h) * dim + c;
  }
};

}  // namespace

void check_kv_alone_case(const KvAloneCase& c, Backend backend, const KvRunner& runner) {
  SCOPED_TRACE(c.name());
  std::mt19937_64 rng(c.seed);
  const bool paged = c.page_size > 0;
  const int pages_per_seq = paged ? (c.capacity + c.page_size - 1) / c.page_size : 0;
  const int num_blocks = paged ? c.batch * pages_per_seq + 2 : 0;
  const int d = c.head_dim;
  const bool varlen = !c.varlen_q.empty();
  // Query rows: sequence b's are rows [first_q[b], first_q[b] + len_q[b]) of q viewed as
  // (rows, heads_q, d).
  std::vector<int32_t> first_q(static_cast<size_t>(c.batch) + 1, 0);
  for (int b = 0; b < c.batch; ++b)
    first_q[size_t(b) + 1] = first_q[size_t(b)] + (varlen ? c.varlen_q[size_t(b)] : c.seqlen_q);
  const auto len_q = [&](int b) { return first_q[size_t(b) + 1] - first_q[size_t(b)]; };
  int longest_q = 0;
  for (int b = 0; b < c.batch; ++b) longest_q = std::max(longest_q, len_q(b));
  const int total_q = first_q.back();
  HostTensor q = varlen ? HostTensor(c.dtype, {total_q, c.heads_q, d}) : HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, d});
  q.fill_normal(rng);
  const HostTensor cu_q = varlen ? int_tensor(first_q) : HostTensor();
  const std::vector<int64_t> cache_shape = paged ? std::vector<int64_t>{num_blocks, c.page_size, c.heads_k, d}
                                                 : std::vector<int64_t>{c.batch, c.capacity, c.heads_k, d};
  HostTensor k_cache(c.dtype, cache_shape), v_cache(c.dtype, cache_shape);
  k_cache.fill_normal(rng);
  v_cache.fill_normal(rng);
  HostTensor k_new, v_new;
  if (c.seqlen_new > 0) {
    k_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, c.heads_k, d});
    v_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, c.heads_k, d});
    k_new.fill_normal(rng);
    v_new.fill_normal(rng);
  }
  // Ends (cache_seqlens) and starts (leftpad): sequence 0 unpadded, sequence 1 padded up to its
  // end (no cached keys: only the appended ones, or none), the last one full and padded.
  std::vector<int32_t> ends(static_cast<size_t>(c.batch)), starts(static_cast<size_t>(c.batch));
  for (int b = 0; b < c.batch; ++b) {
    ends[size_t(b)] = std::uniform_int_distribution<int>(0, c.capacity - c.seqlen_new)(rng);
    starts[size_t(b)] = std::uniform_int_distribution<int>(0, ends[size_t(b)])(rng);
  }
  if (c.batch > 1) starts[1] = ends[1];
  starts[0] = 0;
  if (c.batch > 2) {
    ends.back() = c.capacity - c.seqlen_new;
    starts.back() = std::max(1, ends.back() / 3);
  }
  if (!c.leftpad) std::fill(starts.begin(), starts.end(), 0);
  HostTensor cache_seqlens = int_tensor(ends), leftpad = int_tensor(starts);
  HostTensor block_table;
  if (paged) {
    std::vector<int32_t> pages(static_cast<size_t>(num_blocks));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    block_table = HostTensor(DType::I32, {c.batch, pages_per_seq});
    std::copy(pages.begin(), pages.begin() + c.batch * pages_per_seq, block_table.as<int32_t>());
    // Pages wholly before a sequence's first key are never read: they may name no block.
    for (int b = 0; b < c.batch; ++b)
      for (int p = 0; p < std::min(starts[size_t(b)], ends[size_t(b)] + c.seqlen_new) / c.page_size; ++p)
        block_table.as<int32_t>()[b * pages_per_seq + p] = -1;
  }
  const CacheSlots slots{c.page_size, c.capacity, c.heads_k, d, paged ? block_table.as<int32_t>() : nullptr,
                         pages_per_seq};
  // NaN in every slot that is not a key after the call: before the start, and from the end on
  // (appended keys overwrite theirs).
  for (int b = 0; b < c.batch; ++b)
    for (int pos = 0; pos < c.capacity; ++pos) {
      if (pos >= starts[size_t(b)] && pos < ends[size_t(b)]) continue;
      if (paged && block_table.as<int32_t>()[b * pages_per_seq + pos / c.page_size] < 0) continue;
      for (int h = 0; h < c.heads_k; ++h)
        for (int e = 0; e < d; ++e) {
          k_cache.set(slots.element(b, pos, h, e), std::nanf(""));
          v_cache.set(slots.element(b, pos, h, e), std::nanf(""));
        }
    }
  const int positions = c.capacity + longest_q;
  HostTensor cos, sin;
  if (c.rotary_dim > 0) {
    cos = HostTensor(c.dtype, {positions, c.rotary_dim / 2});
    sin = HostTensor(c.dtype, {positions, c.rotary_dim / 2});
    fill_rotary(cos, sin, 0, positions, c.rotary_dim);
  }

  KvCacheParams params;
  params.q = q.view();
  params.k_cache = k_cache.view();
  params.v_cache = v_cache.view();
  params.k_new = k_new.view();
  params.v_new = v_new.view();
  params.cu_seqlens_q = cu_q.view();
  // (a GPU call cannot read cu_seqlens_q's contents on the host: it needs the longest sequence)
  if (varlen) params.max_seqlen_q = *std::max_element(c.varlen_q.begin(), c.varlen_q.end());
  params.cache_seqlens = cache_seqlens.view();
  params.cache_leftpad = c.leftpad ? leftpad.view() : TensorView{};
  params.block_table = block_table.view();
  params.rotary_cos = cos.view();
  params.rotary_sin = sin.view();
  params.rotary_interleaved = c.interleaved;
  params.causal = c.causal;
  params.window_left = c.window_left;
  params.num_splits = c.num_splits;
  params.backend = backend;
  HostTensor out = varlen ? HostTensor(c.dtype, {total_q, c.heads_q, d}) : HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, d});
  HostTensor lse = varlen ? HostTensor(DType::F32, {c.heads_q, total_q}) : HostTensor(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
  out.poison();
  lse.poison();
  params.out = out.view();
  params.softmax_lse = lse.view();
  const HostTensor k_before = k_cache, v_before = v_cache;
  const Status st = runner ? runner(params) : fwd_kvcache(params);
  ASSERT_TRUE(st.ok()) << st.message();

  // Each sequence alone, unpadded: its cache rows from its first key on, the rotary tables from
  // that position on, through the naive reference.
  const int64_t q_row = int64_t(c.heads_q) * d, new_elems = int64_t(c.seqlen_new) * c.heads_k * d;
  const int64_t slot = int64_t(c.heads_k) * d;
  for (int b = 0; b < c.batch; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const int start = starts[size_t(b)], rows = std::max(c.capacity - start, 1), sq = len_q(b);
    const int64_t q_elems = sq * q_row, lse_elems = int64_t(c.heads_q) * sq;
    HostTensor qb(c.dtype, {1, sq, c.heads_q, d});
    for (int64_t i = 0; i < q_elems; ++i) qb.set(i, q.get(first_q[size_t(b)] * q_row + i));
    HostTensor kb(c.dtype, {1, rows, c.heads_k, d}), vb(c.dtype, {1, rows, c.heads_k, d});
    kb.poison();
    vb.poison();
    for (int pos = start; pos < ends[size_t(b)]; ++pos)
      for (int h = 0; h < c.heads_k; ++h)
        for (int e = 0; e < d; ++e) {
          const int64_t dst = (pos - start) * slot + h * d + e, src = slots.element(b, pos, h, e);
          kb.set(dst, k_before.get(src));
          vb.set(dst, v_before.get(src));
        }
    HostTensor knb, vnb;
    if (c.seqlen_new > 0) {
      knb = HostTensor(c.dtype, {1, c.seqlen_new, c.heads_k, d});
      vnb = HostTensor(c.dtype, {1, c.seqlen_new, c.heads_k, d});
      for (int64_t i = 0; i < new_elems; ++i) {
        knb.set(i, k_new.get(b * new_elems + i));
        vnb.set(i, v_new.get(b * new_elems + i));
      }
    }
    HostTensor cosb, sinb;
    if (c.rotary_dim > 0) {
      cosb = HostTensor(c.dtype, {positions - start, c.rotary_dim / 2});
      sinb = HostTensor(c.dtype, {positions - start, c.rotary_dim / 2});
      fill_rotary(cosb, sinb, start, positions - start, c.rotary_dim);
    }
    const HostTensor lens_b = int_tensor({ends[size_t(b)] - start});

    HostTensor out64(DType::F32, {1, sq, c.heads_q, d}), lse64(DType::F32, {1, c.heads_q, sq});
    HostTensor out_lp(c.dtype, out64.shape()), lse_lp(DType::F32, lse64.shape());
    HostTensor k64 = kb, v64 = vb, klp = kb, vlp = vb;
    for (auto [kc, vc, o, l, precision] :
         {std::tuple{&k64, &v64, &out64, &lse64, cpu::reference::Precision::Float64},
          std::tuple{&klp, &vlp, &out_lp, &lse_lp, cpu::reference::Precision::InputPrecision}}) {
      KvCacheParams pb = params;
      pb.q = qb.view();
      pb.cu_seqlens_q = {};
      pb.k_cache = kc->view();
      pb.v_cache = vc->view();
      pb.k_new = knb.view();
      pb.v_new = vnb.view();
      pb.cache_seqlens = lens_b.view();
      pb.cache_leftpad = {};
      pb.block_table = {};
      pb.rotary_cos = cosb.view();
      pb.rotary_sin = sinb.view();
      pb.out = o->view();
      pb.softmax_lse = l->view();
      pb.backend = Backend::Cpu;
      KvCacheProblem problem;
      const Status built = api::make_kvcache_problem(pb, &problem, {.allow_f32_outputs = true});
      ASSERT_TRUE(built.ok()) << built.message();
      cpu::reference::fwd_kvcache(problem, precision);
    }

    // out rows are packed like q's; lse is (batch, heads, seqlen_q) or, varlen, (heads, total_q).
    std::vector<float> got(static_cast<size_t>(q_elems)), got_lse(static_cast<size_t>(lse_elems));
    for (int64_t i = 0; i < q_elems; ++i) got[size_t(i)] = out.get(first_q[size_t(b)] * q_row + i);
    for (int h = 0; h < c.heads_q; ++h)
      for (int i = 0; i < sq; ++i)
        got_lse[size_t(h * sq + i)] =
            lse.get(varlen ? int64_t(h) * total_q + first_q[size_t(b)] + i : (int64_t(b) * c.heads_q + h) * c.seqlen_q + i);
    const std::vector<float> r = out64.to_float(), rl = lse64.to_float();
    const double err = max_abs_diff(got, r), err_lp = max_abs_diff(out_lp.to_float(), r);
    EXPECT_LE(err, 2 * err_lp + rounding_floor(c.dtype, max_abs(r))) << "out: " << err << " vs " << err_lp;
    const double lerr = max_abs_diff(got_lse, rl), lerr_lp = max_abs_diff(lse_lp.to_float(), rl);
    EXPECT_LE(lerr, 2 * lerr_lp + 1e-5 * std::max(1.0, max_abs(rl))) << "lse: " << lerr << " vs " << lerr_lp;

    // The appended (rotated) keys sit at cache positions [end, end + seqlen_new), as in the
    // unpadded run; the padding is untouched.
    for (int t = 0; t < c.seqlen_new; ++t) {
      const int pos = ends[size_t(b)] + t;
      std::vector<float> kg, kr, vg, vr;
      for (int h = 0; h < c.heads_k; ++h)
        for (int e = 0; e < d; ++e) {
          kg.push_back(k_cache.get(slots.element(b, pos, h, e)));
          vg.push_back(v_cache.get(slots.element(b, pos, h, e)));
          kr.push_back(k64.get((pos - start) * slot + h * d + e));
          vr.push_back(v64.get((pos - start) * slot + h * d + e));
        }
      EXPECT_LE(max_abs_diff(kg, kr), rounding_floor(c.dtype, max_abs(kr))) << "appended key " << t;
      EXPECT_EQ(max_abs_diff(vg, vr), 0.0) << "appended value " << t;
    }
    int touched = 0;
    for (int pos = 0; pos < start; ++pos) {
      if (paged && block_table.as<int32_t>()[b * pages_per_seq + pos / c.page_size] < 0) continue;
      for (int h = 0; h < c.heads_k; ++h)
        for (int e = 0; e < d; ++e)
          touched += !std::isnan(k_cache.get(slots.element(b, pos, h, e))) ||
                     !std::isnan(v_cache.get(slots.element(b, pos, h, e)));
    }
    EXPECT_EQ(touched, 0) << "the call wrote into the left padding";
  }
}

std::vector<KvAloneCase> kv_alone_cases() {
  std::vector<KvAloneCase> cases;
  auto add = [&](auto f) {
    KvAloneCase c;
    f(c);
    c.seed = cases.size() + 101;
    cases.push_back(c);
  };
  add([](KvAloneCase&) {});  // decode, dense, splits chosen
  add([](KvAloneCase& c) { c.num_splits = 1; });
  add([](KvAloneCase& c) { c.num_splits = 4; c.heads_q = c.heads_k = 4; });
  add([](KvAloneCase& c) { c.seqlen_new = 1; });
  add([](KvAloneCase& c) { c.seqlen_new = 4; c.seqlen_q = 4; c.causal = true; });
  add([](KvAloneCase& c) { c.seqlen_new = 3; c.seqlen_q = 3; c.rotary_dim = 64; c.causal = true; });
  add([](KvAloneCase& c) { c.seqlen_new = 2; c.seqlen_q = 2; c.rotary_dim = 32; c.interleaved = true; });
  add([](KvAloneCase& c) { c.seqlen_q = 5; c.seqlen_new = 5; c.causal = true; c.window_left = 20; c.rotary_dim = 16; });
  add([](KvAloneCase& c) { c.page_size = 16; });
  add([](KvAloneCase& c) { c.page_size = 16; c.seqlen_new = 2; c.seqlen_q = 2; c.causal = true; c.rotary_dim = 64; });
  add([](KvAloneCase& c) { c.page_size = 1; c.capacity = 40; c.seqlen_new = 1; });
  add([](KvAloneCase& c) { c.page_size = 7; c.seqlen_new = 3; c.seqlen_q = 3; c.num_splits = 3; });
  add([](KvAloneCase& c) { c.page_size = 64; c.capacity = 300; c.head_dim = 128; c.heads_q = 16; c.heads_k = 1; });
  add([](KvAloneCase& c) { c.seqlen_q = 16; c.causal = true; c.head_dim = 128; c.heads_q = c.heads_k = 2; });
  add([](KvAloneCase& c) { c.dtype = DType::F16; c.seqlen_new = 1; c.head_dim = 96; });
  add([](KvAloneCase& c) { c.dtype = DType::F32; c.seqlen_new = 2; c.seqlen_q = 2; c.causal = true; c.page_size = 32; });
  // Varlen queries (FlashAttention-3's flash_attn_with_kvcache with cu_seqlens_q): speculative
  // decoding and chunked prefill rows of different lengths, one sequence without queries.
  const auto varlen = [](KvAloneCase& c, std::vector<int> lens) {
    c.varlen_q = std::move(lens);
    c.batch = int(c.varlen_q.size());
    c.leftpad = false;
  };
  add([&](KvAloneCase& c) { varlen(c, {1, 4, 0, 7}); c.causal = true; });
  add([&](KvAloneCase& c) { varlen(c, {3, 1, 16, 2}); c.causal = true; c.seqlen_new = 2; c.rotary_dim = 64; });
  add([&](KvAloneCase& c) { varlen(c, {2, 5, 1}); c.page_size = 16; c.seqlen_new = 1; c.rotary_dim = 32; c.interleaved = true; });
  add([&](KvAloneCase& c) { varlen(c, {6, 1, 9, 2}); c.causal = true; c.window_left = 10; c.num_splits = 3; });
  add([&](KvAloneCase& c) { varlen(c, {1, 1, 1, 1, 1}); c.num_splits = 0; c.heads_q = 16; c.heads_k = 2; });
  add([&](KvAloneCase& c) { varlen(c, {4, 2, 3, 1}); c.leftpad = true; c.causal = true; c.seqlen_new = 3; c.rotary_dim = 16; c.page_size = 7; });
  return cases;
}

}  // namespace flashattn::test
