// The benchmark's decode grid (bench/grid.cpp) and the KV caches it builds (bench/kvcache_layout.cpp):
// which shapes it runs on each machine, the work it credits them with, and that the caches are
// valid fwd_kvcache calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>

#include "grid.h"
#include "kvcache_layout.h"
#include "params.h"
#include "tensors.h"

namespace flashattn::bench {
namespace {

// Bytes of K and V of a case in bf16.
double kv_bytes(const Shape& s) { return 2.0 * double(s.batch * s.seqlen_k * s.heads_k * s.head_dim) * 2.0; }

std::vector<Case> decode(Machine machine, GridFilter filter = {}) { return *named_grid("decode", filter, machine); }

TEST(DecodeGrid, EveryCaseIsAForwardKvCacheCallWithinTheMemoryBudget) {
  for (Machine machine : {Machine::Gpu, Machine::Cpu}) {
    const double budget = machine == Machine::Gpu ? 4.0 * (1 << 30) : 64.0 * (1 << 20);
    for (const Case& c : decode(machine)) {
      const Shape& s = c.shape;
      SCOPED_TRACE(describe_case(c));
      ASSERT_TRUE(s.kvcache.has_value());
      EXPECT_EQ(c.direction, Direction::Fwd);
      EXPECT_TRUE(s.causal);
      EXPECT_EQ(s.head_dim, 128);
      EXPECT_TRUE(s.kvcache->page_size == 0 || s.kvcache->page_size == 16 || s.kvcache->page_size == 256);
      EXPECT_LE(kv_bytes(s), budget);
    }
  }
}

TEST(DecodeGrid, GpuSweepAndVariants) {
  const std::vector<Case> cases = decode(Machine::Gpu);
  EXPECT_EQ(cases.size(), 180u);
  // The sweep: GQA 32/8, one query, every batch and length within the budget, three layouts.
  std::set<std::tuple<int64_t, int64_t, int64_t>> sweep;  // batch, seqlen_k, page_size
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    if (s.heads_q == 32 && s.heads_k == 8 && s.seqlen_q == 1 && !s.kvcache->append)
      sweep.insert({s.batch, s.seqlen_k, s.kvcache->page_size});
  }
  for (int64_t batch : {1, 8, 32, 128})
    for (int64_t keys : {1024, 4096, 8192, 16384, 32768, 65536, 131072})
      for (int64_t page : {0, 16, 256})
        EXPECT_EQ(sweep.count({batch, keys, page}), batch * keys <= 32 * 32768 ? 1u : 0u)
            << batch << " x " << keys << " page " << page;
  // Each variant appears at some point.
  auto has = [&](int64_t heads_q, int64_t heads_k, int64_t seqlen_q, bool append) {
    return std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
      const Shape& s = c.shape;
      return s.heads_q == heads_q && s.heads_k == heads_k && s.seqlen_q == seqlen_q && s.kvcache->append == append;
    });
  };
  EXPECT_TRUE(has(64, 8, 1, false));
  EXPECT_TRUE(has(32, 32, 1, false));
  EXPECT_TRUE(has(32, 8, 1, true));
  EXPECT_TRUE(has(32, 8, 4, false));
  EXPECT_TRUE(has(32, 8, 4, true));
}

// FlashAttention-3's decode benchmark (fa3_bench.py --grid decode): batch 1/8/32 x 8k/32k/128k keys
// within batch * keys <= 32 * 32768, GQA 32/8, one query, dense and page 256.
TEST(DecodeGrid, GpuGridCoversTheFa3PeerShapes) {
  const std::vector<Case> cases = decode(Machine::Gpu);
  for (int64_t batch : {1, 8, 32})
    for (int64_t keys : {8192, 32768, 131072}) {
      if (batch * keys > 32 * 32768) continue;
      for (int64_t page : {0, 256}) {
        const bool found = std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
          const Shape& s = c.shape;
          return s.batch == batch && s.seqlen_k == keys && s.heads_q == 32 && s.heads_k == 8 && s.seqlen_q == 1 &&
                 s.kvcache->page_size == page && !s.kvcache->append;
        });
        EXPECT_TRUE(found) << batch << " x " << keys << " page " << page;
      }
    }
}

TEST(DecodeGrid, CpuGridIsSmallerThanTheGpuGrid) {
  const std::vector<Case> cpu = decode(Machine::Cpu);
  ASSERT_FALSE(cpu.empty());
  EXPECT_LT(cpu.size(), decode(Machine::Gpu).size());
  for (const Case& c : cpu) EXPECT_LE(c.shape.seqlen_k, 16384) << describe_case(c);
}

TEST(DecodeGrid, CausalFilterIsHonoured) {
  GridFilter filter;
  filter.causal = false;
  for (const Case& c : decode(Machine::Cpu, filter)) EXPECT_FALSE(c.shape.causal);
}

TEST(KvCacheShape, RunsForwardOnly) {
  Shape s;
  s.batch = 2;
  s.seqlen_q = 1;
  s.seqlen_k = 64;
  s.kvcache = KvCache{16, false};
  for (const Case& c : single_shape_cases(s, {})) EXPECT_EQ(c.direction, Direction::Fwd);
  s.kvcache.reset();
  EXPECT_EQ(single_shape_cases(s, {}).size(), 4u);  // both causal settings, both directions
}

Shape decode_shape(int64_t seqlen_q, int64_t page_size, bool append) {
  Shape s;
  s.batch = 3;
  s.seqlen_q = seqlen_q;
  s.seqlen_k = 1000;
  s.heads_q = 8;
  s.heads_k = 2;
  s.head_dim = 64;
  s.causal = true;
  s.kvcache = KvCache{page_size, append};
  return s;
}

// GB/s of a decode row is the K+V read; FLOPs count the visible query-key pairs.
TEST(KvCacheWork, BytesAreTheKvReadAndFlopsTheVisiblePairs) {
  const Shape s = decode_shape(4, 16, true);
  EXPECT_DOUBLE_EQ(min_bytes(s, Direction::Fwd, 2), 2.0 * 3 * 1000 * 2 * 64 * 2);
  // Rows see 997, 998, 999 and 1000 keys under the bottom-right causal mask.
  EXPECT_DOUBLE_EQ(flops(s, Direction::Fwd), 4.0 * 3 * 8 * 64 * (997 + 998 + 999 + 1000));
  Shape one = decode_shape(1, 0, false);
  const double all_keys = 4.0 * 3 * 8 * 64 * 1000;
  EXPECT_DOUBLE_EQ(flops(one, Direction::Fwd), all_keys);
  one.causal = false;
  EXPECT_DOUBLE_EQ(flops(one, Direction::Fwd), all_keys);
}

TEST(KvCacheLayout, DenseCacheHoldsEachSequenceInARow) {
  const KvCacheLayout layout = make_kvcache_layout(decode_shape(4, 0, true));
  EXPECT_EQ(layout.cache_rows, 3);
  EXPECT_EQ(layout.keys_per_row, 1000);
  EXPECT_EQ(layout.pages_per_sequence, 0);
  EXPECT_TRUE(layout.block_table.empty());
  EXPECT_EQ(layout.seqlen_new, 4);
  EXPECT_EQ(layout.cache_seqlens, std::vector<int32_t>(3, 996));  // 996 cached + 4 appended
  EXPECT_EQ(make_kvcache_layout(decode_shape(4, 0, false)).cache_seqlens, std::vector<int32_t>(3, 1000));
}

TEST(KvCacheLayout, PagedCacheUsesEveryPageOnceInAShuffledOrder) {
  const KvCacheLayout layout = make_kvcache_layout(decode_shape(1, 16, false));
  EXPECT_EQ(layout.keys_per_row, 16);
  EXPECT_EQ(layout.pages_per_sequence, 63);  // ceil(1000 / 16)
  EXPECT_EQ(layout.cache_rows, 3 * 63);
  std::vector<int32_t> sorted = layout.block_table, identity(sorted.size());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(sorted, identity);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
}

// Every layout the grid uses makes a valid call, run here on the CPU backend.
TEST(KvCacheLayout, MakesValidFwdKvCacheCalls) {
  for (int64_t seqlen_q : {1, 4})
    for (int64_t page_size : {0, 16, 256})
      for (bool append : {false, true}) {
        const Shape s = decode_shape(seqlen_q, page_size, append);
        SCOPED_TRACE(describe_case({s, Direction::Fwd}));
        const KvCacheLayout layout = make_kvcache_layout(s);
        const DType dt = DType::BF16;
        HostTensor q(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
        HostTensor k_cache(dt, {layout.cache_rows, layout.keys_per_row, s.heads_k, s.head_dim});
        HostTensor v_cache(dt, {layout.cache_rows, layout.keys_per_row, s.heads_k, s.head_dim});
        HostTensor out(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
        HostTensor lse(DType::F32, {s.batch, s.heads_q, s.seqlen_q});
        const HostTensor cache_seqlens = int32_tensor(layout.cache_seqlens, {s.batch});
        HostTensor k_new, v_new, block_table;
        if (append) {
          k_new = HostTensor(dt, {s.batch, layout.seqlen_new, s.heads_k, s.head_dim});
          v_new = HostTensor(dt, {s.batch, layout.seqlen_new, s.heads_k, s.head_dim});
          fill_random_normal(k_new.data(), dt, k_new.numel(), 4);
          fill_random_normal(v_new.data(), dt, v_new.numel(), 5);
        }
        if (page_size > 0) block_table = int32_tensor(layout.block_table, {s.batch, layout.pages_per_sequence});
        fill_random_normal(q.data(), dt, q.numel(), 1);
        fill_random_normal(k_cache.data(), dt, k_cache.numel(), 2);
        fill_random_normal(v_cache.data(), dt, v_cache.numel(), 3);
        const KvCacheViews views{q.view(),   k_cache.view(), v_cache.view(),     k_new.view(), v_new.view(),
                                 cache_seqlens.view(), block_table.view(), out.view(), lse.view()};
        const Status status = fwd_kvcache(make_kvcache_params(s, views, Backend::Cpu));
        EXPECT_TRUE(status.ok()) << status.message();
      }
}

}  // namespace
}  // namespace flashattn::bench
