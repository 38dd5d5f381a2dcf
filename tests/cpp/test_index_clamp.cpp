// The clamps of index contents (common/rows.h, common/problem.h, common/kvcache_problem.h): valid
// contents give exactly the unclamped lengths and offsets, and garbage contents (negative, huge,
// non-monotonic) keep every row a kernel may address inside the allocation the host described.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "common/kvcache_problem.h"
#include "common/problem.h"
#include "common/rows.h"

namespace flashattn::test {
namespace {

int32_t garbage(std::mt19937_64& rng, int64_t bound) {
  switch (rng() % 5) {
    case 0: return INT32_MIN;
    case 1: return INT32_MAX;
    case 2: return -int32_t(rng() % 100) - 1;
    case 3: return int32_t(bound + int64_t(rng() % 50));
    default: return int32_t(int64_t(rng() % uint64_t(2 * bound + 3)) - bound);
  }
}

TEST(IndexClamp, ClampIndex) {
  EXPECT_EQ(clamp_index(5, 0, 10), 5);
  EXPECT_EQ(clamp_index(-3, 0, 10), 0);
  EXPECT_EQ(clamp_index(INT32_MAX, 0, 10), 10);
  EXPECT_EQ(clamp_index(4, 0, -1), -1);  // an empty range: hi wins
  EXPECT_EQ(clamp_entry(INT32_MIN, 0, 10), 0);
  EXPECT_EQ(clamp_entry(INT32_MAX, 0, 10), 10);
  EXPECT_EQ(entry_below(3, 4), 3);
  EXPECT_EQ(entry_below(4, 4), 0);
  EXPECT_EQ(entry_below(-1, 4), 0);
  EXPECT_EQ(entry_below(INT32_MIN, 4), 0);
}

TEST(IndexClamp, ValidVarlenUnchanged) {
  const std::vector<int32_t> cu_q = {0, 3, 3, 10}, cu_k = {0, 5, 9, 9}, used = {4, 0, 0};
  SeqLens lens;
  lens.seqlen_q = 7;  // max_seqlen_q
  lens.seqlen_k = 5;
  lens.cu_seqlens_q = cu_q.data();
  lens.cu_seqlens_k = cu_k.data();
  lens.total_q = 10;
  lens.total_k = 9;
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(lens.q(b), cu_q[b + 1] - cu_q[b]);
    EXPECT_EQ(lens.q_start(b), cu_q[b]);
    EXPECT_EQ(lens.k(b), cu_k[b + 1] - cu_k[b]);
    EXPECT_EQ(lens.k_stored(b), cu_k[b + 1] - cu_k[b]);
    EXPECT_EQ(lens.k_start(b), cu_k[b]);
  }
  lens.seqused_k = used.data();
  for (int64_t b = 0; b < 3; ++b) EXPECT_EQ(lens.k(b), used[b]);

  RowsView rows;
  rows.cu_seqlens = cu_q.data();
  rows.extent = 10;
  rows.row_stride = 100;
  rows.head_stride = 7;
  EXPECT_EQ(rows.offset(2, 4, 1), (3 + 4) * 100 + 7);
  LseView lse;
  lse.cu_seqlens = cu_q.data();
  lse.total = 10;
  lse.head_stride = 10;
  EXPECT_EQ(lse.offset(2, 4, 1), 10 + 7);
}

TEST(IndexClamp, ValidCacheUnchanged) {
  // Capacity 32, two new keys; cache_seqlens within [0, 30], left padding within them.
  const std::vector<int32_t> seqlens = {0, 30, 12}, pad = {0, 5, 12}, batch_idx = {2, 0, 1};
  const std::vector<int32_t> table = {3, 1, 0, 2, 5, 4};  // (3, 2): page size 16
  KvCacheProblem kp;
  SeqLens& lens = kp.attn.lens;
  lens.seqlen_k = 32;
  lens.cache_seqlens = seqlens.data();
  lens.seqlen_k_added = 2;
  lens.k_leftpad = pad.data();
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(lens.k(b), seqlens[b] + 2 - pad[b]);
    EXPECT_EQ(lens.k_first_position(b), pad[b]);
    EXPECT_EQ(kp.first_new_position(b), seqlens[b]);
    for (int64_t t = 0; t < 2; ++t) {
      EXPECT_TRUE(kp.new_key_fits(b, t));
      EXPECT_EQ(kp.new_key_row(b, t), seqlens[b] + t - pad[b]);
    }
  }
  RowsView paged;
  paged.block_table = table.data();
  paged.block_table_stride = 2;
  paged.page_size = 16;
  paged.batch_stride = 1000;
  paged.row_stride = 10;
  paged.row_offset = pad.data();
  paged.extent = 6;
  paged.positions = 32;
  EXPECT_EQ(paged.offset(1, 12, 0), 2 * 1000 + 1 * 10);  // position 17: page 1 of sequence 1, row 1
  RowsView indexed;
  indexed.batch_index = batch_idx.data();
  indexed.batch_stride = 1000;
  indexed.row_stride = 10;
  indexed.extent = 3;
  indexed.positions = 32;
  EXPECT_EQ(indexed.offset(0, 3, 0), 2 * 1000 + 30);
}

// Garbage varlen contents: every sequence's rows lie within the rows, its keys within the keys
// (or a paged sequence's capacity), and within the bound the workspaces are sized by.
TEST(IndexClamp, GarbageVarlenStaysInRows) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t batch = 1 + int64_t(rng() % 5), total_q = int64_t(rng() % 40), total_k = int64_t(rng() % 40);
    std::vector<int32_t> cu_q(static_cast<size_t>(batch + 1)), cu_k(static_cast<size_t>(batch + 1)), used(static_cast<size_t>(batch));
    for (auto& v : cu_q) v = garbage(rng, total_q);
    for (auto& v : cu_k) v = garbage(rng, total_k);
    for (auto& v : used) v = garbage(rng, total_k);
    SeqLens lens;
    lens.seqlen_q = int64_t(rng() % 20);
    lens.seqlen_k = int64_t(rng() % 20);
    lens.cu_seqlens_q = cu_q.data();
    lens.cu_seqlens_k = cu_k.data();
    lens.total_q = total_q;
    lens.total_k = total_k;
    const bool paged = rng() % 3 == 0;
    if (paged) lens.k_capacity = 1 + int64_t(rng() % 30);
    if (rng() % 2) lens.seqused_k = used.data();
    RowsView q_rows;
    q_rows.cu_seqlens = cu_q.data();
    q_rows.extent = total_q;
    q_rows.row_stride = 1;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t q = lens.q(b);
      ASSERT_GE(q, 0);
      ASSERT_LE(q, lens.seqlen_q);
      if (q > 0) {
        ASSERT_GE(q_rows.offset(b, 0, 0), 0);
        ASSERT_LE(q_rows.offset(b, q - 1, 0), total_q - 1);
        ASSERT_EQ(q_rows.offset(b, 0, 0), lens.q_start(b));
      }
      const int64_t stored = lens.k_stored(b), k = lens.k(b);
      ASSERT_GE(k, 0);
      ASSERT_LE(k, stored);
      if (paged) {
        ASSERT_LE(stored, lens.k_capacity);
      } else {
        ASSERT_GE(lens.k_start(b), 0);
        ASSERT_LE(lens.k_start(b) + stored, total_k);
      }
      ASSERT_LE(std::max(q, k), lens.host_bound());
    }
  }
}

// Garbage cache contents: every key and appended key a kernel addresses maps to a page (or cache
// row) that exists and a position within the capacity.
TEST(IndexClamp, GarbageCacheStaysInCache) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t batch = 1 + int64_t(rng() % 4), page_size = 1 + int64_t(rng() % 8);
    const int64_t max_blocks = int64_t(rng() % 5), capacity = max_blocks * page_size;
    const int64_t pages = 1 + int64_t(rng() % 6), added = int64_t(rng() % 6);
    std::vector<int32_t> seqlens(static_cast<size_t>(batch)), pad(static_cast<size_t>(batch)), table(static_cast<size_t>(batch * std::max<int64_t>(1, max_blocks)));
    for (auto& v : seqlens) v = garbage(rng, capacity);
    for (auto& v : pad) v = garbage(rng, capacity);
    for (auto& v : table) v = garbage(rng, pages);
    KvCacheProblem kp;
    SeqLens& lens = kp.attn.lens;
    lens.seqlen_k = capacity;
    if (rng() % 4 != 0) {
      lens.cache_seqlens = seqlens.data();
      lens.seqlen_k_added = added;
    }
    if (rng() % 2) lens.k_leftpad = pad.data();
    RowsView cache;
    cache.block_table = table.data();
    cache.block_table_stride = std::max<int64_t>(1, max_blocks);
    cache.page_size = page_size;
    cache.batch_stride = 100;
    cache.row_stride = 1;
    cache.row_offset = lens.k_leftpad;
    cache.extent = pages;
    cache.positions = capacity;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t k = lens.k(b), first = cache.first_position(b);
      ASSERT_GE(k, 0);
      ASSERT_LE(k, lens.host_bound());
      // Rows the attention reads: positions first + row below the capacity.
      if (k > 0) {
        ASSERT_EQ(first, lens.k_first_position(b));
        ASSERT_LE(first + k, capacity);
      }
      for (int64_t row = 0; row < k; ++row) {
        const int64_t off = cache.offset(b, row, 0);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, pages * 100);
      }
      // Appended keys that fit land inside the cache.
      for (int64_t t = 0; t < lens.seqlen_k_added; ++t) {
        if (!kp.new_key_fits(b, t)) continue;
        const int64_t position = first + kp.new_key_row(b, t);
        ASSERT_GE(position, 0);
        ASSERT_LT(position, capacity);
        const int64_t off = cache.offset(b, kp.new_key_row(b, t), 0);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, pages * 100);
      }
    }
  }
}

}  // namespace
}  // namespace flashattn::test
