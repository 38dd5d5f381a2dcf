// One fwd_kvcache test case (dense or paged cache, appended keys, rotary, cache_batch_idx, GQA,
// splits, masks), checked against the naive reference with the project's tolerance rule. The
// runner lets GPU tests mirror the call onto the device.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::test {

struct KvCase {
  int batch = 3, seqlen_q = 1, capacity = 300, heads_q = 8, heads_k = 2, head_dim = 64;
  int seqlen_new = 0;   // keys appended by the call
  int page_size = 0;    // 0: dense cache
  int rotary_dim = 0;   // 0: no rotary
  bool interleaved = false;
  bool causal = false;
  int window_left = -1;
  bool batch_idx = false;
  bool full_cache = false;  // no cache_seqlens: every slot is a key
  int num_splits = 0;
  float softcap = 0.f;
  DType dtype = DType::BF16;
  uint64_t seed = 7;

  std::string name() const {
    std::ostringstream s;
    s << "b" << batch << "_sq" << seqlen_q << "_cap" << capacity << "_h" << heads_q << "x" << heads_k << "_d"
      << head_dim << "_new" << seqlen_new << "_page" << page_size << "_rot" << rotary_dim << (interleaved ? "i" : "")
      << (causal ? "_causal" : "") << (window_left >= 0 ? "_win" : "") << (batch_idx ? "_bidx" : "")
      << (full_cache ? "_full" : "") << "_splits" << num_splits << (softcap > 0 ? "_softcap" : "") << "_"
      << dtype_name(dtype);
    return s.str();
  }
};

inline void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name(); }

using KvRunner = std::function<Status(const KvCacheParams&)>;

// Runs the case on `backend` (through runner when given) and the references; EXPECTs inside.
void check_kvcache_case(const KvCase& c, Backend backend, const KvRunner& runner = {});

// The sweep every backend runs.
std::vector<KvCase> kv_cases();

}  // namespace flashattn::test
