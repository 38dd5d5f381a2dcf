// fwd_kvcache calls whose sequences differ in layout (left-padded caches, varlen queries), checked
// against an independent formulation: each sequence run alone, as a batch of one with dense
// queries, through the naive reference on a cache that starts at its first key (the padding cut
// off, rotary tables shifted by it). Slots before each sequence's first key and past its last
// hold NaN, so a kernel reading one shows it. The runner lets GPU tests mirror the call.
#pragma once

#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kvcache_case.h"

namespace flashattn::test {

struct KvAloneCase {
  int batch = 4, seqlen_q = 1, capacity = 160, heads_q = 8, heads_k = 2, head_dim = 64;
  std::vector<int> varlen_q;  // non-empty: varlen queries with these lengths (batch = its size)
  bool leftpad = true;        // random cache_leftpad (sequence 0 unpadded)
  int seqlen_new = 0;
  int page_size = 0;   // 0: dense cache
  int rotary_dim = 0;  // 0: no rotary
  bool interleaved = false;
  bool causal = false;
  int window_left = -1;
  int num_splits = 0;
  DType dtype = DType::BF16;
  uint64_t seed = 5;

  std::string name() const {
    std::ostringstream s;
    s << "b" << batch << "_sq" << seqlen_q << (varlen_q.empty() ? "" : "_varlen") << (leftpad ? "_leftpad" : "")
      << "_cap" << capacity << "_h" << heads_q << "x" << heads_k << "_d"
      << head_dim << "_new" << seqlen_new << "_page" << page_size << "_rot" << rotary_dim << (interleaved ? "i" : "")
      << (causal ? "_causal" : "") << (window_left >= 0 ? "_win" : "") << "_splits" << num_splits << "_"
      << dtype_name(dtype);
    return s.str();
  }
};

inline void PrintTo(const KvAloneCase& c, std::ostream* os) { *os << c.name(); }

// Runs the case on `backend` (through runner when given); EXPECTs inside.
void check_kv_alone_case(const KvAloneCase& c, Backend backend, const KvRunner& runner = {});

std::vector<KvAloneCase> kv_alone_cases();

}  // namespace flashattn::test
