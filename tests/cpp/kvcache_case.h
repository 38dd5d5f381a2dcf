// One fwd_kvcache test case (dense or paged cache, appended keys, rotary, cache_batch_idx, GQA,
// splits, masks), checked against the naive reference with the project's tolerance rule. The
// runner lets GPU tests mirror the call onto the device.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "test_util.h"

namespace flashattn::test {

struct KvCase {
  int batch = 3, seqlen_q = 1, capacity = 300, heads_q = 8, heads_k = 2, head_dim = 64;
  int head_dim_v = 0;   // 0: head_dim
  int seqlen_new = 0;   // keys appended by the call
  int page_size = 0;    // 0: dense cache
  int rotary_dim = 0;   // 0: no rotary
  bool interleaved = false;
  bool causal = false;
  int window_left = -1, window_right = -1;
  bool batch_idx = false;
  bool full_cache = false;    // no cache_seqlens: every slot is a key
  bool unused_pages = false;  // block-table entries past the pages in use are -1 (never read)
  bool nan_past_cache = false;  // cache slots past each sequence's keys hold NaN (never read)
  int num_splits = 0;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 slopes (heads_q), 2 slopes (batch, heads_q)
  std::optional<float> softmax_scale;
  DType dtype = DType::BF16;
  uint64_t seed = 7;

  int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }

  std::string name() const {
    std::ostringstream s;
    s << "b" << batch << "_sq" << seqlen_q << "_cap" << capacity << "_h" << heads_q << "x" << heads_k << "_d"
      << head_dim << (head_dim_v > 0 ? "_dv" + std::to_string(head_dim_v) : "") << "_new" << seqlen_new << "_page"
      << page_size << "_rot" << rotary_dim << (interleaved ? "i" : "") << (causal ? "_causal" : "")
      << (window_left >= 0 || window_right >= 0 ? "_win" : "") << (batch_idx ? "_bidx" : "")
      << (full_cache ? "_full" : "") << (unused_pages ? "_unused" : "") << (nan_past_cache ? "_nanpast" : "") << "_splits" << num_splits
      << (softcap > 0 ? "_softcap" : "") << (alibi ? "_alibi" + std::to_string(alibi) : "")
      << (softmax_scale ? "_scale" : "") << "_" << dtype_name(dtype);
    return s.str();
  }
};

inline void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name(); }

using KvRunner = std::function<Status(const KvCacheParams&)>;

// The tensors of a case with fresh random data (the cache row of each sequence and the block table
// drawn from the case's seed).
class KvRun {
 public:
  explicit KvRun(const KvCase& c);
  // The call over caches kc/vc (copies of k_cache/v_cache: the call appends into them).
  KvCacheParams params(const HostTensor& kc, const HostTensor& vc, TensorView out, TensorView lse,
                       Backend backend) const;
  std::vector<int64_t> out_shape() const;
  std::vector<int64_t> lse_shape() const;

  HostTensor q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, batch_index, cos, sin, slopes;
  HostTensor descales[3];  // fp8: q, k, v factors per (batch entry, kv head)
  // fp8 inputs write bfloat16, as FlashAttention-3.
  DType out_dtype() const { return c_.dtype == DType::F8E4M3 ? DType::BF16 : c_.dtype; }

 private:
  KvCase c_;
};

// Runs the case on `backend` (through runner when given) and the references; EXPECTs inside.
void check_kvcache_case(const KvCase& c, Backend backend, const KvRunner& runner = {});

// The sweep every backend runs.
std::vector<KvCase> kv_cases();
// Speculative decoding's shapes: a few new tokens x GQA ratios x masks, score modifiers, splits,
// dense and paged caches poisoned past their keys (the packed-query FA2 plans' cases).
std::vector<KvCase> speculative_kv_cases();

}  // namespace flashattn::test
