#include "kvcache_layout.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace flashattn::bench {

KvCacheLayout make_kvcache_layout(const Shape& s) {
  const KvCache& cache = *s.kvcache;
  KvCacheLayout layout;
  layout.seqlen_new = cache.append ? s.seqlen_q : 0;
  // cache_seqlens is given even without appending, as serving engines pass it: the kernel reads
  // the lengths as it would there.
  layout.cache_seqlens.assign(size_t(s.batch), int32_t(s.seqlen_k - layout.seqlen_new));
  if (cache.page_size == 0) {
    layout.cache_rows = s.batch;
    layout.keys_per_row = s.seqlen_k;
    return layout;
  }
  layout.keys_per_row = cache.page_size;
  layout.pages_per_sequence = (s.seqlen_k + cache.page_size - 1) / cache.page_size;
  layout.cache_rows = s.batch * layout.pages_per_sequence;
  // Pages in a shuffled order, not 0, 1, 2, ...: a serving engine hands out pages from a free
  // list, so after a while a sequence's pages lie scattered over the pool, and a kernel must not
  // look faster for reading them in address order. No page is shared, so appending is valid.
  layout.block_table.resize(size_t(layout.cache_rows));
  std::iota(layout.block_table.begin(), layout.block_table.end(), 0);
  std::shuffle(layout.block_table.begin(), layout.block_table.end(), std::mt19937_64(0x9a6e5));
  return layout;
}

}  // namespace flashattn::bench
