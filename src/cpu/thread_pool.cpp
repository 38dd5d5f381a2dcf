#include "cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::cpu {
namespace {

class ThreadPool {
 public:
  static ThreadPool& instance() {
    static ThreadPool pool;
    return pool;
  }

  int size() {
    std::lock_guard<std::mutex> lock(config_mutex_);
    return requested_threads();
  }

  void set_threads(int threads) {
    std::lock_guard<std::mutex> lock(config_mutex_);
    requested_ = threads;
  }

  void run(int64_t n_items, const std::function<void(int64_t, int)>& body) {
    // One parallel region at a time: concurrent callers (several host threads calling the
    // library) queue here rather than interleave their items.
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    int threads;
    {
      std::lock_guard<std::mutex> lock(config_mutex_);
      threads = requested_threads();
    }
    if (threads > n_items) threads = int(n_items);
    if (threads <= 1) {
      for (int64_t i = 0; i < n_items; ++i) body(i, 0);
      return;
    }
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

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      stopping_ = true;
    }
    job_ready_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  int requested_threads() const {
    if (requested_ > 0) return requested_;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : int(hw);
  }

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
        job_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
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

  std::mutex config_mutex_;
  int requested_ = 0;

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
  bool stopping_ = false;
};

}  // namespace

int worker_count() { return ThreadPool::instance().size(); }

void parallel_for(int64_t n_items, const std::function<void(int64_t, int)>& body) {
  if (n_items <= 0) return;
  ThreadPool::instance().run(n_items, body);
}

}  // namespace flashattn::cpu

namespace flashattn {

void set_cpu_threads(int threads) { cpu::ThreadPool::instance().set_threads(threads < 0 ? 0 : threads); }
int cpu_threads() { return cpu::worker_count(); }

}  // namespace flashattn
