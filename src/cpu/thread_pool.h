// A persistent pool of worker threads for the CPU backend. parallel_for hands out items through
// an atomic counter (dynamic balancing: causal row blocks differ in cost); the caller works too.
#pragma once

#include <cstdint>
#include <functional>

namespace flashattn::cpu {

// The thread count set_cpu_threads asked for (0 = all hardware threads), and what it resolves to.
void set_configured_threads(int threads);
int configured_threads();
int resolved_threads();

// The largest count set_cpu_threads accepts: max(64, 4 x hardware threads). More threads than
// that only cost memory (a stack each) and scheduling.
int max_cpu_threads();

// The threads of one library call. The configured count is read once, here: every parallel_for
// of the team hands out worker indices below size(), so scratch sized per worker always fits,
// even when set_cpu_threads changes the count while the call waits for the pool.
class WorkerTeam {
 public:
  WorkerTeam();
  int size() const { return size_; }

  // Runs body(item, worker) for item in [0, n_items), worker in [0, size()). Items run
  // concurrently; body must not throw.
  void parallel_for(int64_t n_items, const std::function<void(int64_t item, int worker)>& body) const;

 private:
  int size_;
};

}  // namespace flashattn::cpu
