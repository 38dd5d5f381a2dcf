// fwd_kvcache with cache_leftpad, checked against an independent formulation: each sequence run
// alone through the naive reference on a cache that starts at its first key (the padding cut
// off, rotary tables shifted by the padding). Slots before each sequence's first key and past its
// last hold NaN, so a kernel reading one shows it. The runner lets GPU tests mirror the call.
#pragma once

#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kvcache_case.h"

namespace flashattn::test {

struct LeftpadCase {
  int batch = 4, seqlen_q = 1, capacity = 160, heads_q = 8, heads_k = 2, head_dim = 64;
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
    s << "b" << batch << "_sq" << seqlen_q << "_cap" << capacity << "_h" << heads_q << "x" << heads_k << "_d"
      << head_dim << "_new" << seqlen_new << "_page" << page_size << "_rot" << rotary_dim << (interleaved ? "i" : "")
      << (causal ? "_causal" : "") << (window_left >= 0 ? "_win" : "") << "_splits" << num_splits << "_"
      << dtype_name(dtype);
    return s.str();
  }
};

inline void PrintTo(const LeftpadCase& c, std::ostream* os) { *os << c.name(); }

// Runs the case on `backend` (through runner when given); EXPECTs inside.
void check_leftpad_case(const LeftpadCase& c, Backend backend, const KvRunner& runner = {});

std::vector<LeftpadCase> leftpad_cases();

}  // namespace flashattn::test
