// The memory pool that the GPU code's stream-ordered workspaces come from: one per device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "flashattn/flashattn.h"

namespace flashattn {

// Bytes a device's pool keeps mapped across a synchronisation. The device's default pool keeps
// none (release threshold 0), so after every host synchronisation the next workspace allocation
// maps fresh memory, a slow driver call on the host (docs/PERF.md, thirty-third session); a
// training step that synchronises once per layer pays it once per layer. Workspaces up to this size
// (every forward's, decode's) stay mapped; a larger backward workspace maps the rest again.
inline constexpr size_t kWorkspacePoolKeepBytes = size_t(64) << 20;

// The pool for allocations ordered on `stream`, on the current device (the one the library
// launches on): created on first use, with kWorkspacePoolKeepBytes as its release threshold, and
// kept for the process. nullptr while `stream` is being captured into a CUDA graph: a captured
// allocation belongs to the graph, not to a pool, and nothing that is not stream-ordered (such as
// creating a pool) may run then. The device's default pool and its settings are left as they are.
Status workspace_pool(cudaStream_t stream, cudaMemPool_t* pool);

}  // namespace flashattn
