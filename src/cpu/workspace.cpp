#include "cpu/workspace.h"

#include <atomic>

#include "flashattn/flashattn.h"

namespace flashattn::cpu {
namespace {
std::atomic<std::size_t> g_current{0};
std::atomic<std::size_t> g_peak{0};
}  // namespace

void workspace_allocated(std::size_t bytes) {
  const std::size_t now = g_current.fetch_add(bytes) + bytes;
  std::size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

void workspace_released(std::size_t bytes) { g_current.fetch_sub(bytes); }

}  // namespace flashattn::cpu

namespace flashattn {

WorkspaceStats cpu_workspace_stats() { return {cpu::g_current.load(), cpu::g_peak.load()}; }
void reset_cpu_workspace_peak() { cpu::g_peak.store(cpu::g_current.load()); }

}  // namespace flashattn
