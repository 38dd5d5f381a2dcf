// The CPU backend's thread count in the public API: checked here, kept by the thread pool.
#include "api/rules.h"
#include "cpu/thread_pool.h"
#include "flashattn/flashattn.h"

namespace flashattn {

Status set_cpu_threads(int threads) {
  FA_CHECK(api::check_cpu_threads(threads, cpu::max_cpu_threads()));
  cpu::set_configured_threads(threads);
  return {};
}

int cpu_threads() { return cpu::resolved_threads(); }

}  // namespace flashattn
