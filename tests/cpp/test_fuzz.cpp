// Fuzzing the host side: random valid calls over every feature on the CPU backend (and Auto)
// against the float64 reference, and random invalid calls (one rule broken) that must come back as
// a clean error naming an argument, with nothing written. Seeds and counts: fuzz_seed.h; a failure
// prints the seed that replays it. Run under AddressSanitizer/UBSan too (tools/sanitize_host.sh).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "api/validate.h"
#include "attention_case.h"
#include "combine_case.h"
#include "fuzz_calls.h"
#include "fuzz_case.h"
#include "fuzz_driver.h"
#include "fuzz_invalid.h"
#include "kvcache_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

// Salts: each test draws its own cases from the same seeds.
enum Salt : uint64_t { kFwd = 0xf01, kBwd, kKvCache, kCombine, kBadFwd, kBadBwd, kBadKvCache, kBadCombine };

const FuzzScope kValidScope{};                                       // every dtype, cases of up to ~3M MACs
const FuzzScope kInvalidScope{.float32 = true, .work_budget = 60000};  // only validated, never run

Backend host_backend(std::mt19937_64& rng) { return rng() % 2 ? Backend::Cpu : Backend::Auto; }

// The bytes of the tensors a refused call must not write.
class Untouched {
 public:
  explicit Untouched(std::initializer_list<const HostTensor*> tensors) {
    for (const HostTensor* t : tensors) {
      const auto* p = static_cast<const uint8_t*>(t->data());
      saved_.push_back({t, std::vector<uint8_t>(p, p + t->numel() * int64_t(dtype_size(t->dtype())))});
    }
  }
  bool still() const {
    for (const auto& [t, bytes] : saved_)
      if (!bytes.empty() && std::memcmp(t->data(), bytes.data(), bytes.size()) != 0) return false;
    return true;
  }

 private:
  std::vector<std::pair<const HostTensor*, std::vector<uint8_t>>> saved_;
};

// ---------------------------------------------------------------------------------------------
// Valid calls against the reference
// ---------------------------------------------------------------------------------------------
TEST(FuzzValid, ForwardMatchesReference) {
  for_each_case(kFwd, 900, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kValidScope);
    SCOPED_TRACE(describe(c));
    AttentionRun run(c);
    const FwdResult f = run.check_fwd(host_backend(rng));
    expect_within(f.out, 2.0, run.floor(AttentionRun::Result::Out, f.out), "out");
    expect_within(f.lse, 2.0, run.floor(AttentionRun::Result::Lse, f.lse), "lse");
  });
}

TEST(FuzzValid, BackwardMatchesReference) {
  for_each_case(kBwd, 500, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kValidScope);
    const bool deterministic = rng() % 2;
    SCOPED_TRACE(describe(c) + (deterministic ? " deterministic" : ""));
    AttentionRun run(c);
    const BwdResult b = run.check_bwd(host_backend(rng), {}, [&](const BwdParams& params) {
      BwdParams p = params;
      p.deterministic = deterministic;
      return bwd(p);
    });
    expect_within(b.dq, 2.0, run.floor(AttentionRun::Result::Dq, b.dq), "dq");
    expect_within(b.dk, 2.0, run.floor(AttentionRun::Result::Dk, b.dk), "dk");
    expect_within(b.dv, 2.0, run.floor(AttentionRun::Result::Dv, b.dv), "dv");
  });
}

TEST(FuzzValid, KvCacheMatchesReference) {
  for_each_case(kKvCache, 500, [](std::mt19937_64& rng) {
    const KvCase c = draw_kv_case(rng, kValidScope);
    SCOPED_TRACE(describe(c));
    check_kvcache_case(c, host_backend(rng));
  });
}

TEST(FuzzValid, CombineMatchesReference) {
  for_each_case(kCombine, 300, [](std::mt19937_64& rng) {
    const CombineCase c = draw_combine_case(rng, kValidScope);
    check_combine_case(c, host_backend(rng));
  });
}

// ---------------------------------------------------------------------------------------------
// Broken calls: a clean error naming an argument, nothing written
// ---------------------------------------------------------------------------------------------
TEST(FuzzInvalid, ForwardRefusesBrokenCalls) {
  for_each_case(kBadFwd, 700, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kInvalidScope);
    SCOPED_TRACE(describe(c));
    FwdCall call(c, rng, host_backend(rng));
    FwdParams& p = call.params;
    IndexPadding padding;
    for (TensorView* index : {&p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k}) padding.pad(*index);
    AttnProblem problem;
    ASSERT_TRUE(api::make_fwd_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_fwd(p, rng, {});
    const Untouched outputs{&call.out, &call.lse};
    expect_refused(broken, api::make_fwd_problem(p, &problem), [&] { return fwd(p); });
    EXPECT_TRUE(outputs.still()) << "a refused call wrote its outputs";
  });
}

TEST(FuzzInvalid, BackwardRefusesBrokenCalls) {
  for_each_case(kBadBwd, 500, [](std::mt19937_64& rng) {
    const AttentionCase c = draw_attention_case(rng, kInvalidScope);
    SCOPED_TRACE(describe(c));
    BwdCall call(c, rng, host_backend(rng));
    BwdParams& p = call.params;
    IndexPadding padding;
    for (TensorView* index : {&p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k}) padding.pad(*index);
    BwdProblem problem;
    ASSERT_TRUE(api::make_bwd_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_bwd(p, rng, {});
    const Untouched outputs{&call.dq, &call.dk, &call.dv};
    expect_refused(broken, api::make_bwd_problem(p, &problem), [&] { return bwd(p); });
    EXPECT_TRUE(outputs.still()) << "a refused call wrote its outputs";
  });
}

TEST(FuzzInvalid, KvCacheRefusesBrokenCalls) {
  for_each_case(kBadKvCache, 600, [](std::mt19937_64& rng) {
    const KvCase c = draw_kv_case(rng, kInvalidScope);
    SCOPED_TRACE(describe(c));
    KvCall call(c, rng, host_backend(rng));
    KvCacheParams& p = call.params;
    IndexPadding padding;
    for (TensorView* index : {&p.cache_seqlens, &p.cache_batch_idx, &p.block_table}) padding.pad(*index);
    KvCacheProblem problem;
    ASSERT_TRUE(api::make_kvcache_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_kvcache(p, rng, {});
    const Untouched outputs{&call.out, &call.lse, &call.k_cache, &call.v_cache};
    expect_refused(broken, api::make_kvcache_problem(p, &problem), [&] { return fwd_kvcache(p); });
    EXPECT_TRUE(outputs.still()) << "a refused call wrote its outputs or the cache";
  });
}

TEST(FuzzInvalid, CombineRefusesBrokenCalls) {
  for_each_case(kBadCombine, 300, [](std::mt19937_64& rng) {
    const CombineCase c = draw_combine_case(rng, kInvalidScope);
    SCOPED_TRACE(c.name());
    CombineCall call(c, rng, host_backend(rng));
    CombineParams& p = call.params;
    CombineProblem problem;
    ASSERT_TRUE(api::make_combine_problem(p, &problem).ok()) << "the unbroken call";
    const Breakage broken = break_combine(p, rng, {});
    const Untouched outputs{&call.out, &call.lse};
    expect_refused(broken, api::make_combine_problem(p, &problem), [&] { return combine(p); });
    EXPECT_TRUE(outputs.still()) << "a refused call wrote its outputs";
  });
}

}  // namespace
}  // namespace flashattn::test
