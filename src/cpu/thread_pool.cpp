#include "cpu/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace flashattn::cpu {
namespace {

std::atomic<int> g_configured_threads{0};  // set_cpu_threads; 0 = all hardware threads

int hardware_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : int(hw);
}

class ThreadPool {
 public:
  // Runs body over n_items on `threads` threads (the caller included), worker indices below it.
  void run(int64_t n_items, int threads, const std::function<void(int64_t, int)>& body) {
    if (threads > n_items) threads = int(n_items);
    if (threads <= 1) {
      for (int64_t i = 0; i < n_items; ++i) body(i, 0);
      return;
    }
    // One parallel region at a time: concurrent callers (several host threads calling the
    // library) queue here rather than interleave their items.
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    ensure_workers(threads - 1);
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      job_body_ = &body;
      job_items_ = n_items;
      next_item_.store(0);
      active_workers_ = threads - 1;
      pending_ = threads - 1;
      ++generation_;
    }
    job_ready_.notify_all();
    work(0);
    std::unique_lock<std::mutex> lock(job_mutex_);
    job_done_.wait(lock, [&] { return pending_ == 0; });
    job_body_ = nullptr;
  }

 private:
  void ensure_workers(int count) {
    while (int(workers_.size()) < count) {
      const int index = int(workers_.size()) + 1;  // worker 0 is the caller
      workers_.emplace_back([this, index] { worker_loop(index); });
    }
  }

  void worker_loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(job_mutex_);
        job_ready_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (index > active_workers_) continue;  // this job uses fewer threads
      }
      work(index);
      std::lock_guard<std::mutex> lock(job_mutex_);
      if (--pending_ == 0) job_done_.notify_one();
    }
  }

  void work(int worker) {
    for (;;) {
      const int64_t item = next_item_.fetch_add(1);
      if (item >= job_items_) return;
      (*job_body_)(item, worker);
    }
  }

  std::mutex run_mutex_;
  std::mutex job_mutex_;
  std::condition_variable job_ready_, job_done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int)>* job_body_ = nullptr;
  int64_t job_items_ = 0;
  std::atomic<int64_t> next_item_{0};
  int active_workers_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
};

// The pool lives until the process ends (never destroyed: at exit a call may still be running in
// another thread). Created on first use.
std::atomic<ThreadPool*> g_pool{nullptr};

ThreadPool& pool() {
  ThreadPool* current = g_pool.load(std::memory_order_acquire);
  if (current != nullptr) return *current;
  auto* fresh = new ThreadPool;
  if (g_pool.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread created it first
  return *current;
}

// After fork() the child has only the forking thread: the pool's workers are gone and its mutexes
// may be held by threads that no longer exist, so its first call would wait forever. The child
// forgets that pool (leaked on purpose: destroying its joinable std::threads would terminate) and
// starts a fresh one on first use. Only a pointer store: safe in an atfork handler.
void forget_pool_in_child() { g_pool.store(nullptr, std::memory_order_relaxed); }

// Registered at load time, while the process is still single-threaded.
[[maybe_unused]] const int g_atfork_registered = pthread_atfork(nullptr, nullptr, forget_pool_in_child);

}  // namespace

void set_configured_threads(int threads) { g_configured_threads.store(threads); }
int configured_threads() { return g_configured_threads.load(); }

int resolved_threads() {
  const int configured = configured_threads();
  return configured > 0 ? configured : hardware_threads();
}

int max_cpu_threads() { return std::max(64, 4 * hardware_threads()); }

WorkerTeam::WorkerTeam() : size_(resolved_threads()) {}

void WorkerTeam::parallel_for(int64_t n_items, const std::function<void(int64_t, int)>& body) const {
  if (n_items <= 0) return;
  pool().run(n_items, size_, body);
}

}  // namespace flashattn::cpu
