// Random valid calls for the fuzz tests (test_fuzz.cpp, gpu/test_fuzz_gpu.cu): every feature of
// the API drawn at random, alone and in combination, with shapes small enough that the float64
// reference stays fast. Draws are pure functions of the generator, so a case replays from its
// seed (fuzz_seed.h).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "attention_case.h"
#include "combine_case.h"
#include "kvcache_case.h"

namespace flashattn::test {

// What the backend under test takes, and how big a case may be.
struct FuzzScope {
  bool float32 = true;            // float32 inputs (the CPU backend; the GPU kernels take fp16/bf16)
  int64_t work_budget = 3000000;  // batch x heads_q x seqlen_q x seqlen_k x (d + dv), at most
};

// Dense or varlen (batch 0, empty sequences, ragged lengths), seqused_k, GQA/MQA, head dims 8..256
// (head_dim_v may differ), causal, windows (huge ones too), softcap, ALiBi (per head or per batch),
// dropout, split-KV (given or chosen), an explicit (zero, negative) softmax scale.
AttentionCase draw_attention_case(std::mt19937_64& rng, const FuzzScope& scope);

// Dense, batch-indexed or paged caches (any page size, unused table entries), appended keys,
// rotary (interleaved or not), with or without cache_seqlens, and the options of the forward.
KvCase draw_kv_case(std::mt19937_64& rng, const FuzzScope& scope);

// Dense or varlen partials, any splits, empty rows and splits, every output dtype, lse optional.
CombineCase draw_combine_case(std::mt19937_64& rng, const FuzzScope& scope);

// Every field, for failure messages.
std::string describe(const AttentionCase& c);
std::string describe(const KvCase& c);

}  // namespace flashattn::test
