// The CPU backend: the tiled FlashAttention algorithm on the host, multi-threaded over
// (batch, head, row block). Never allocates anything O(seqlen_q x seqlen_k).
#pragma once

#include "common/kvcache_problem.h"
#include "common/problem.h"
#include "flashattn/flashattn.h"

namespace flashattn::cpu {

Status fwd(const AttnProblem& problem);
Status bwd(const BwdProblem& problem);
Status fwd_kvcache(const KvCacheProblem& problem);
Status combine(const CombineProblem& problem);
// mask: uint8 (batch, heads, seqlen_q, seqlen_k), contiguous.
void dropout_mask(const DropoutArgs& args, int64_t batch, int64_t heads, int64_t seqlen_q,
                  int64_t seqlen_k, uint8_t* mask);

}  // namespace flashattn::cpu
