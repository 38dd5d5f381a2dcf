// Gradients of keys that no query sees because seqused_k cuts them off: exactly zero, as the math
// has them. The backward kernels write dK and dV only for the keys they walk (key < seqused_k[b]),
// so the rows from seqused_k[b] to the end of each sequence's rows are zeroed here (FA2 and FA3).
#pragma once

#include "common/problem.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// Enqueues the zeroing on `stream` (a cudaStream_t); nothing without seqused_k.
Status zero_unused_key_grads(const BwdProblem& problem, void* stream);

}  // namespace flashattn
