// Valid calls built from random cases, owning their tensors: what the invalid fuzz breaks, on the
// host (test_fuzz.cpp) and mirrored onto the GPU (gpu/test_fuzz_gpu.cu). Outputs start poisoned;
// data is random (validation never reads it).
#pragma once

#include <random>

#include "attention_case.h"
#include "combine_case.h"
#include "kvcache_case.h"
#include "test_util.h"

namespace flashattn::test {

// Owning structs whose params point into their own tensors: neither copied nor moved.
struct FwdCall {
  FwdCall(const AttentionCase& c, std::mt19937_64& rng, Backend backend);
  FwdCall(const FwdCall&) = delete;
  FwdCall& operator=(const FwdCall&) = delete;
  AttentionRun run;
  HostTensor out, lse;
  FwdParams params;  // softmax_lse left out at random (optional)
};

struct BwdCall {
  BwdCall(const AttentionCase& c, std::mt19937_64& rng, Backend backend);
  BwdCall(const BwdCall&) = delete;
  BwdCall& operator=(const BwdCall&) = delete;
  AttentionRun run;  // out and lse: random stand-ins for a forward's
  HostTensor dq, dk, dv;
  BwdParams params;  // deterministic at random
};

struct KvCall {
  KvCall(const KvCase& c, std::mt19937_64& rng, Backend backend);
  KvCall(const KvCall&) = delete;
  KvCall& operator=(const KvCall&) = delete;
  KvRun run;
  HostTensor k_cache, v_cache, out, lse;  // the caches: copies the call may append into
  KvCacheParams params;
};

struct CombineCall {
  CombineCall(const CombineCase& c, std::mt19937_64& rng, Backend backend);
  CombineCall(const CombineCall&) = delete;
  CombineCall& operator=(const CombineCall&) = delete;
  HostTensor out_partial, lse_partial, out, lse;
  CombineParams params;
};

}  // namespace flashattn::test
