#include "paged_varlen_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace flashattn::test {

FwdResult check_paged_varlen_case(const PagedVarlenCase& c, Backend backend, const FwdRunner& runner) {
  SCOPED_TRACE(c.name());
  AttentionRun run(c.attn);
  const AttentionCase& a = c.attn;
  const int batch = int(a.varlen_q.size()), page = c.page_size;
  int max_k = 0;
  for (int len : a.varlen_k) max_k = std::max(max_k, len);
  const int pages_per_seq = std::max(1, (max_k + page - 1) / page) + 1;  // a spare page per row
  const int num_blocks = batch * pages_per_seq + 3;

  // Shuffled pages; every slot NaN until a key is copied in. Table entries past a sequence's last
  // page are -1: they are never read.
  std::mt19937_64 rng(a.seed * 31 + 7);
  std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  HostTensor table(DType::I32, {batch, pages_per_seq});
  HostTensor k_pages(a.dtype, {num_blocks, page, a.heads_k, a.head_dim});
  HostTensor v_pages(a.dtype, {num_blocks, page, a.heads_k, a.dv()});
  k_pages.poison();
  v_pages.poison();
  const int32_t* cu_k = run.cu_k.as<int32_t>();
  const int64_t k_row = int64_t(a.heads_k) * a.head_dim, v_row = int64_t(a.heads_k) * a.dv();
  for (int b = 0; b < batch; ++b) {
    const int len = a.varlen_k[size_t(b)];
    for (int p = 0; p < pages_per_seq; ++p)
      table.as<int32_t>()[b * pages_per_seq + p] = p * page < len ? blocks[size_t(b * pages_per_seq + p)] : -1;
    for (int j = 0; j < len; ++j) {
      const int64_t block = table.as<int32_t>()[b * pages_per_seq + j / page], slot = block * page + j % page;
      for (int64_t e = 0; e < k_row; ++e) k_pages.set(slot * k_row + e, run.k.get((cu_k[b] + j) * k_row + e));
      for (int64_t e = 0; e < v_row; ++e) v_pages.set(slot * v_row + e, run.v.get((cu_k[b] + j) * v_row + e));
    }
  }

  // The references run on the packed k/v; the backend gets the pages instead.
  const FwdRunner paged = [&](const FwdParams& packed) {
    FwdParams p = packed;
    p.k = k_pages.view();
    p.v = v_pages.view();
    p.block_table = table.view();
    return runner ? runner(p) : fwd(p);
  };
  return run.check_fwd(backend, paged);
}

std::vector<PagedVarlenCase> paged_varlen_cases() {
  std::vector<PagedVarlenCase> cases;
  auto add = [&](int page, auto f) {
    PagedVarlenCase c;
    c.page_size = page;
    c.attn.heads_q = 8;
    c.attn.heads_k = 2;
    // A mixed batch: decode rows (one query over a long cache), a fresh prefill, chunked prefill
    // continuing a cached prefix, a one-key sequence, and an empty one.
    c.attn.varlen_q = {1, 37, 5, 1, 0, 1};
    c.attn.varlen_k = {300, 37, 120, 1, 0, 77};
    c.attn.batch = int(c.attn.varlen_q.size());
    c.attn.causal = true;
    f(c.attn);
    c.attn.seed = cases.size() + 41;
    cases.push_back(c);
  };
  for (int page : {1, 7, 16, 64, 256}) add(page, [](AttentionCase&) {});
  add(16, [](AttentionCase& a) { a.causal = false; });
  add(16, [](AttentionCase& a) { a.num_splits = 4; });
  add(16, [](AttentionCase& a) { a.num_splits = 0; a.varlen_q = {1, 1, 1, 1, 1, 1}; });
  add(16, [](AttentionCase& a) { a.window_left = 40; a.window_right = 0; });
  add(16, [](AttentionCase& a) { a.seqused_k = {250, 30, 120, 1, 0, 10}; });
  add(32, [](AttentionCase& a) { a.softcap = 20.f; a.alibi = 2; });
  add(16, [](AttentionCase& a) { a.heads_q = a.heads_k = 4; a.head_dim = 128; a.dtype = DType::F16; });
  add(64, [](AttentionCase& a) { a.heads_q = 16; a.heads_k = 1; a.head_dim = 96; a.head_dim_v = 64; });
  add(8, [](AttentionCase& a) { a.head_dim = 256; a.dtype = DType::F32; a.varlen_q = {3, 2}; a.varlen_k = {40, 9}; });
  for (auto& c : cases) c.attn.batch = int(c.attn.varlen_q.size());
  return cases;
}

}  // namespace flashattn::test
