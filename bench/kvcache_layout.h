// The cache of a fwd_kvcache case, described once for the host and CUDA runners: the shape of
// k_cache and v_cache, the block table of a paged cache, and the cache lengths.
#pragma once

#include <cstdint>
#include <vector>

#include "grid.h"

namespace flashattn::bench {

struct KvCacheLayout {
  int64_t cache_rows = 0;      // dim 0 of k_cache and v_cache: sequences (dense) or pages
  int64_t keys_per_row = 0;    // dim 1: the sequence's seqlen_k (dense) or the page size
  int64_t pages_per_sequence = 0;       // block_table's dim 1; 0 for a dense cache
  std::vector<int32_t> block_table;     // batch x pages_per_sequence, row-major; empty when dense
  std::vector<int32_t> cache_seqlens;   // per sequence: keys in the cache before the call
  int64_t seqlen_new = 0;               // keys the call appends (k_new, v_new); 0: none
};

// The layout of shape.kvcache (which must be set).
KvCacheLayout make_kvcache_layout(const Shape& shape);

}  // namespace flashattn::bench
