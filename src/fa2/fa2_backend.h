// The FA2 backend (mma.sync kernels, sm80+). Compiled only when the library is built with CUDA.
#pragma once

#include "common/problem.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// Forward over device tensors, enqueued on `stream` (a cudaStream_t). num_splits is a hint this
// kernel does not need (one CTA per row block already fills the GPU when rows are many).
Status fwd(const AttnProblem& problem, void* stream);

}  // namespace flashattn::fa2
