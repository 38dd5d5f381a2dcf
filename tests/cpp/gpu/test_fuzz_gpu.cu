// Fuzzing the GPU backends with the host fuzz's generators (fuzz_case.h, fuzz_invalid.h): random
// valid fp16/bf16 calls on FA2 (forward, backward in both dQ modes, KV cache, combine) and FA3
// (forward, backward) against the float64 reference, and broken calls on CUDA tensors, which
// validation must refuse (a clean error naming an argument) before a kernel reads anything, with
// every output untouched. Small counts in the GPU suite; tools/gpu/fuzz.sh runs >= 10,000 of each
// kind per backend from a fresh seed. A failure prints the seed that replays it (fuzz_seed.h).
// Skips without a GPU (FA3: without an sm90 GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "api/validate.h"
#include "attention_case.h"
#include "device_call.h"
#include "device_mirror.h"
#include "fa3/fa3_backend.h"
#include "fuzz_calls.h"
#include "fuzz_case.h"
#include "fuzz_driver.h"
#include "fuzz_invalid.h"
#include "gpu_test_util.h"

namespace flashattn::test {
namespace {

enum Salt : uint64_t {
  kFa2Fwd = 0x9a01, kFa2Bwd, kFa2KvCache, kFa2Combine, kFa3Fwd, kFa3Bwd,
  kFa2BadFwd, kFa2BadBwd, kFa2BadKvCache, kFa2BadCombine, kFa3BadFwd, kFa3BadBwd, kContents
};

const FuzzScope kGpuScope{.float32 = false};  // the kernels take fp16/bf16
const FuzzScope kInvalidScope{.float32 = true, .work_budget = 60000};
const BreakScope kOnDevice{.on_device = true};
using Result = AttentionRun::Result;

void expect_forward_matches(AttentionRun& run, Backend backend) {
  const FwdResult f = run.check_fwd(backend, gpu_test::fwd_on_device);
  expect_within(f.out, 2.0, run.floor(Result::Out, f.out), "out");
  expect_within(f.lse, 2.0, run.floor(Result::Lse, f.lse), "lse");
}

// The forward on Auto (FA3 where it covers the call, else FA2), the backward on `backend`.
void expect_backward_matches(AttentionRun& run, Backend backend, bool deterministic) {
  const FwdRunner forward = [](const FwdParams& host) {
    FwdParams p = host;
    p.backend = Backend::Auto;
    return gpu_test::fwd_on_device(p);
  };
  const BwdRunner backward = [deterministic](const BwdParams& host) {
    BwdParams p = host;
    p.deterministic = deterministic;
    return gpu_test::bwd_on_device(p);
  };
  const BwdResult b = run.check_bwd(backend, forward, backward);
  expect_within(b.dq, 2.0, run.floor(Result::Dq, b.dq), "dq");
  expect_within(b.dk, 2.0, run.floor(Result::Dk, b.dk), "dk");
  expect_within(b.dv, 2.0, run.floor(Result::Dv, b.dv), "dv");
}

// Whether the FA3 forward (and backward) take the case (fa3::check, fa3::check_bwd).
// (The backward's forward runs on Auto: FA3 need not take it.)
bool fa3_covers(const AttentionCase& c, bool backward) {
  std::mt19937_64 rng(c.seed);
  BwdCall call(c, rng, Backend::Fa3);
  if (backward) {
    BwdProblem problem;
    return api::make_bwd_problem(call.params, &problem).ok() && fa3::check_bwd(problem).ok();
  }
  AttnProblem problem;
  return api::make_fwd_problem(call.run.fwd_params(call.run.out.view(), call.run.lse.view(), Backend::Fa3), &problem)
             .ok() &&
         fa3::check(problem).ok();
}

// Cases FA3 takes, drawn from the case's own generator (so a seed still replays it).
AttentionCase draw_fa3_case(std::mt19937_64& rng, bool backward) {
  for (;;) {
    const AttentionCase c = draw_attention_case(rng, kGpuScope);
    if (fa3_covers(c, backward)) return c;
  }
}

// ---------------------------------------------------------------------------------------------
// Valid calls against the reference
// ---------------------------------------------------------------------------------------------
TEST(Fa2Fuzz, ForwardMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kFa2Fwd, 100, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kGpuScope);
    SCOPED_TRACE(describe(c));
    AttentionRun run(c);
    expect_forward_matches(run, Backend::Fa2);
  });
}

TEST(Fa2Fuzz, BackwardMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kFa2Bwd, 60, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kGpuScope);
    const bool deterministic = rng() % 2;
    SCOPED_TRACE(describe(c) + (deterministic ? " deterministic" : ""));
    AttentionRun run(c);
    expect_backward_matches(run, Backend::Fa2, deterministic);
  });
}

TEST(Fa2Fuzz, KvCacheMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kFa2KvCache, 60, [](std::mt19937_64& rng) {
    const KvCase c = draw_kv_case(rng, kGpuScope);
    SCOPED_TRACE(describe(c));
    check_kvcache_case(c, Backend::Fa2, gpu_test::kvcache_on_device);
  });
}

TEST(Fa2Fuzz, CombineMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kFa2Combine, 40, [](std::mt19937_64& rng) {
    check_combine_case(draw_combine_case(rng, kGpuScope), Backend::Fa2, gpu_test::combine_on_device);
  });
}

TEST(Fa3Fuzz, ForwardMatchesReference) {
  SKIP_WITHOUT_SM90();
  for_each_case(kFa3Fwd, 100, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_fa3_case(rng, /*backward=*/false);
    SCOPED_TRACE(describe(c));
    AttentionRun run(c);
    expect_forward_matches(run, Backend::Fa3);
  });
}

TEST(Fa3Fuzz, BackwardMatchesReference) {
  SKIP_WITHOUT_SM90();
  for_each_case(kFa3Bwd, 60, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_fa3_case(rng, /*backward=*/true);
    const bool deterministic = rng() % 2;
    SCOPED_TRACE(describe(c) + (deterministic ? " deterministic" : ""));
    AttentionRun run(c);
    expect_backward_matches(run, Backend::Fa3, deterministic);
  });
}

// ---------------------------------------------------------------------------------------------
// Broken calls on CUDA tensors: refused by validation, no kernel launched, nothing written
// ---------------------------------------------------------------------------------------------
void fwd_refuses_broken_calls(uint64_t salt, Backend backend) {
  for_each_case(salt, 150, [backend](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kInvalidScope);
    SCOPED_TRACE(describe(c));
    FwdCall call(c, rng, backend);
    gpu_test::DeviceCall device;
    FwdParams p = device.fwd(call.params);
    AttnProblem problem;
    ASSERT_TRUE(api::make_fwd_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_fwd(p, rng, kOnDevice);
    expect_refused(broken, api::make_fwd_problem(p, &problem), [&] { return fwd(p); });
    EXPECT_TRUE(device.untouched()) << "a refused call wrote its outputs";
  });
}

void bwd_refuses_broken_calls(uint64_t salt, Backend backend) {
  for_each_case(salt, 150, [backend](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kInvalidScope);
    SCOPED_TRACE(describe(c));
    BwdCall call(c, rng, backend);
    gpu_test::DeviceCall device;
    BwdParams p = device.bwd(call.params);
    BwdProblem problem;
    ASSERT_TRUE(api::make_bwd_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_bwd(p, rng, kOnDevice);
    expect_refused(broken, api::make_bwd_problem(p, &problem), [&] { return bwd(p); });
    EXPECT_TRUE(device.untouched()) << "a refused call wrote its outputs";
  });
}

TEST(Fa2FuzzInvalid, ForwardRefusesBrokenCalls) {
  SKIP_WITHOUT_CUDA_DEVICE();
  fwd_refuses_broken_calls(kFa2BadFwd, Backend::Fa2);
}

TEST(Fa2FuzzInvalid, BackwardRefusesBrokenCalls) {
  SKIP_WITHOUT_CUDA_DEVICE();
  bwd_refuses_broken_calls(kFa2BadBwd, Backend::Fa2);
}

TEST(Fa2FuzzInvalid, KvCacheRefusesBrokenCalls) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kFa2BadKvCache, 150, [](std::mt19937_64& rng) {
    const KvCase c = draw_kv_case(rng, kInvalidScope);
    SCOPED_TRACE(describe(c));
    KvCall call(c, rng, Backend::Fa2);
    gpu_test::DeviceCall device;
    KvCacheParams p = device.kvcache(call.params);
    KvCacheProblem problem;
    ASSERT_TRUE(api::make_kvcache_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_kvcache(p, rng, kOnDevice);
    expect_refused(broken, api::make_kvcache_problem(p, &problem), [&] { return fwd_kvcache(p); });
    EXPECT_TRUE(device.untouched()) << "a refused call wrote its outputs or the cache";
  });
}

TEST(Fa2FuzzInvalid, CombineRefusesBrokenCalls) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kFa2BadCombine, 100, [](std::mt19937_64& rng) {
    const CombineCase c = draw_combine_case(rng, kInvalidScope);
    SCOPED_TRACE(c.name());
    CombineCall call(c, rng, Backend::Fa2);
    gpu_test::DeviceCall device;
    CombineParams p = device.combine(call.params);
    CombineProblem problem;
    ASSERT_TRUE(api::make_combine_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_combine(p, rng, kOnDevice);
    expect_refused(broken, api::make_combine_problem(p, &problem), [&] { return combine(p); });
    EXPECT_TRUE(device.untouched()) << "a refused call wrote its outputs";
  });
}

TEST(Fa3FuzzInvalid, ForwardRefusesBrokenCalls) {
  SKIP_WITHOUT_SM90();
  fwd_refuses_broken_calls(kFa3BadFwd, Backend::Fa3);
}

TEST(Fa3FuzzInvalid, BackwardRefusesBrokenCalls) {
  SKIP_WITHOUT_SM90();
  bwd_refuses_broken_calls(kFa3BadBwd, Backend::Fa3);
}

// ---------------------------------------------------------------------------------------------
// Garbage in CUDA index tensors (cu_seqlens, seqused_k, cache_seqlens, cache_leftpad, block
// tables, cache_batch_idx): validation cannot read them, so the kernels clamp every entry into
// the allocation (validate.h). Such a call may answer anything but must not fault, so the device
// stays usable. FA2 forward (with and without split-KV, dense-varlen and paged k/v), backward
// (both dQ modes) and KV cache (dense, paged, batch-indexed, left-padded, appending, rotary); the
// split-KV runs go through the combine (the public combine takes no index tensors). A fault
// poisons the process's CUDA context for every later test; tools/gpu/fuzz.sh also runs this
// under compute-sanitizer memcheck, which sees reads out of bounds that do not fault.
// ---------------------------------------------------------------------------------------------
int32_t* entries(const TensorView& t) { return static_cast<int32_t*>(t.data); }

// Overwrites the n entries at `v` (an index tensor's host copy, uploaded afterwards) with
// garbage of one kind: negative, huge, past the bound, non-monotonic, or random around the bound.
void scribble(int32_t* v, int64_t n, int64_t bound, std::mt19937_64& rng, std::string* what) {
  if (n == 0) return;
  const auto pick = [&](std::initializer_list<int64_t> values) {
    return *(values.begin() + int64_t(rng() % values.size()));
  };
  const auto any = [&] { return int64_t(rng() % n); };
  const auto fit = [](int64_t x) { return int32_t(std::clamp<int64_t>(x, INT32_MIN, INT32_MAX)); };
  switch (rng() % 5) {
    case 0:  // negative entries
      for (int k = 0, m = 1 + int(rng() % 3); k < m; ++k) v[any()] = fit(pick({-1, -7, -bound - 1, INT32_MIN}));
      *what += " negative";
      break;
    case 1:  // huge entries
      for (int k = 0, m = 1 + int(rng() % 3); k < m; ++k) v[any()] = fit(pick({INT32_MAX, INT32_MAX - 1, 1 << 30}));
      *what += " huge";
      break;
    case 2:  // just past the bound
      for (int k = 0, m = 1 + int(rng() % 3); k < m; ++k) v[any()] = fit(bound + pick({0, 1, 8, 1000}));
      *what += " past-bound";
      break;
    case 3:  // non-monotonic: reversed, or one entry below its predecessor
      if (rng() % 2) {
        std::reverse(v, v + n);
      } else if (n >= 2) {
        const int64_t i = 1 + int64_t(rng() % (n - 1));
        v[i] = fit(int64_t(v[i - 1]) - pick({1, 3, 100000}));
      }
      *what += " non-monotonic";
      break;
    default:  // everything random around the bound
      for (int64_t i = 0; i < n; ++i) v[i] = fit(int64_t(rng() % uint64_t(4 * bound + 8)) - 2 * bound - 4);
      *what += " random";
      break;
  }
}

struct IndexTensor {
  const char* name;
  TensorView view;
  int64_t bound;  // what valid entries stay within (rows, keys, pages, cache rows)
};

// Scribbles over one or all of the defined index tensors; returns what it did ("" for none).
std::string scribble_some(const std::vector<IndexTensor>& tensors, std::mt19937_64& rng) {
  std::vector<const IndexTensor*> defined;
  for (const IndexTensor& t : tensors)
    if (t.view.defined() && t.view.numel() > 0) defined.push_back(&t);
  if (defined.empty()) return "";
  std::string what;
  const bool all = rng() % 4 == 0;
  const size_t one = size_t(rng() % defined.size());
  for (size_t i = 0; i < defined.size(); ++i) {
    if (!all && i != one) continue;
    what += std::string(what.empty() ? "" : ";") + defined[i]->name;
    scribble(entries(defined[i]->view), defined[i]->view.numel(), defined[i]->bound, rng, &what);
  }
  return what;
}

std::vector<IndexTensor> varlen_index_tensors(const VarlenArgs& v, const TensorView& q, const TensorView& k,
                                              int64_t k_bound) {
  return {{"cu_seqlens_q", v.cu_seqlens_q, q.shape[0]},
          {"cu_seqlens_k", v.cu_seqlens_k, k_bound},
          {"seqused_k", v.seqused_k, k_bound}};
}

void expect_no_fault(const Status& st) {
  EXPECT_NE(st.code(), ErrorCode::CudaError) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "a kernel faulted";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A varlen call's k and v moved into shuffled pages of a cache with a block table (fwd only).
struct PagedKv {
  HostTensor k, v, table;
  PagedKv(FwdParams& p, std::mt19937_64& rng) {
    const int64_t batch = p.cu_seqlens_q.shape[0] - 1, heads_k = p.k.shape[1];
    const int64_t page = int64_t(1) << (rng() % 6);  // 1 .. 32
    int64_t longest = 0;
    const int32_t* cu = entries(p.cu_seqlens_k);
    for (int64_t b = 0; b < batch; ++b) longest = std::max<int64_t>(longest, cu[b + 1] - cu[b]);
    const int64_t blocks = (std::max<int64_t>(longest, p.max_seqlen_k) + page - 1) / page + int64_t(rng() % 2);
    const int64_t pages = std::max<int64_t>(1, batch * blocks);
    k = HostTensor(p.k.dtype, {pages, page, heads_k, p.k.shape[2]});
    v = HostTensor(p.v.dtype, {pages, page, heads_k, p.v.shape[2]});
    table = HostTensor(DType::I32, {batch, std::max<int64_t>(blocks, 1)});
    int32_t* t = static_cast<int32_t*>(table.data());
    for (int64_t i = 0; i < table.numel(); ++i) t[i] = int32_t(i % pages);
    std::shuffle(t, t + table.numel(), rng);
    p.k = k.view();
    p.v = v.view();
    p.block_table = table.view();
  }
};

void garbage_fwd(std::mt19937_64& rng) {
  AttentionCase c = draw_attention_case(rng, kGpuScope);
  c.num_splits = int(rng() % 3) == 0 ? 1 + int(rng() % 4) : c.num_splits;  // split-KV (and its combine)
  SCOPED_TRACE(describe(c));
  FwdCall call(c, rng, Backend::Fa2);
  FwdParams& p = call.params;
  std::optional<PagedKv> paged;
  if (p.cu_seqlens_q.defined() && rng() % 3 == 0) paged.emplace(p, rng);
  std::vector<IndexTensor> index =
      varlen_index_tensors(p, p.q, p.k, paged ? p.block_table.shape[1] * p.k.shape[1] : p.k.shape[0] * (p.cu_seqlens_k.defined() ? 1 : p.k.shape[1]));
  if (paged) index.push_back({"block_table", p.block_table, p.k.shape[0]});
  const std::string what = scribble_some(index, rng);
  if (what.empty()) return;  // no index tensor to break
  SCOPED_TRACE("garbage: " + what + (paged ? " (paged k/v)" : ""));
  gpu_test::DeviceCall device;
  FwdParams d = device.fwd(p);
  d.block_table = device.input(p.block_table);
  expect_no_fault(fwd(d));
}

void garbage_bwd(std::mt19937_64& rng) {
  const AttentionCase c = draw_attention_case(rng, kGpuScope);
  SCOPED_TRACE(describe(c));
  BwdCall call(c, rng, Backend::Fa2);
  BwdParams& p = call.params;
  p.deterministic = rng() % 2;
  const int64_t k_rows = p.k.shape[0] * (p.cu_seqlens_k.defined() ? 1 : p.k.shape[1]);
  const std::string what = scribble_some(varlen_index_tensors(p, p.q, p.k, k_rows), rng);
  if (what.empty()) return;
  SCOPED_TRACE("garbage: " + what + (p.deterministic ? " deterministic" : ""));
  gpu_test::DeviceCall device;
  expect_no_fault(bwd(device.bwd(p)));
}

void garbage_kvcache(std::mt19937_64& rng) {
  const KvCase c = draw_kv_case(rng, kGpuScope);
  SCOPED_TRACE(describe(c));
  KvCall call(c, rng, Backend::Fa2);
  KvCacheParams& p = call.params;
  const int64_t batch = p.q.shape[0];
  const bool paged = p.block_table.defined();
  const int64_t capacity = paged ? p.block_table.shape[1] * p.k_cache.shape[1] : p.k_cache.shape[1];
  HostTensor leftpad(DType::I32, {batch});
  if (rng() % 3 == 0) {  // left padding within each sequence's keys
    int32_t* pad = static_cast<int32_t*>(leftpad.data());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t keys = p.cache_seqlens.defined() ? entries(p.cache_seqlens)[b] : capacity;
      pad[b] = int32_t(keys > 0 ? int64_t(rng() % uint64_t(keys + 1)) : 0);
    }
    p.cache_leftpad = leftpad.view();
  }
  const std::string what = scribble_some({{"cache_seqlens", p.cache_seqlens, capacity},
                                          {"cache_leftpad", p.cache_leftpad, capacity},
                                          {"cache_batch_idx", p.cache_batch_idx, p.k_cache.shape[0]},
                                          {"block_table", p.block_table, p.k_cache.shape[0]}},
                                         rng);
  if (what.empty()) return;
  SCOPED_TRACE("garbage: " + what + (p.cache_leftpad.defined() ? " (left-padded)" : ""));
  gpu_test::DeviceCall device;
  KvCacheParams d = device.kvcache(p);
  d.cache_leftpad = device.input(p.cache_leftpad);
  expect_no_fault(fwd_kvcache(d));
}

TEST(Fa2FuzzContents, GarbageIndexContentsDoNotFault) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for_each_case(kContents, 150, [](std::mt19937_64& rng) {
    switch (rng() % 3) {
      case 0: garbage_fwd(rng); break;
      case 1: garbage_bwd(rng); break;
      default: garbage_kvcache(rng); break;
    }
  });
}

}  // namespace
}  // namespace flashattn::test
