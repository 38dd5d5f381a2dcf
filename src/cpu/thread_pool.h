// A persistent pool of worker threads for the CPU backend. parallel_for hands out items through
// an atomic counter (dynamic balancing: causal row blocks differ in cost); the caller works too.
#pragma once

#include <cstdint>
#include <functional>

namespace flashattn::cpu {

int worker_count();  // threads a parallel_for uses, the caller included

// Runs body(item, worker) for item in [0, n_items), worker in [0, worker_count()).
// Items run concurrently; body must not throw.
void parallel_for(int64_t n_items, const std::function<void(int64_t item, int worker)>& body);

}  // namespace flashattn::cpu
