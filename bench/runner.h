// Runs one case on one device and fills a Row. The host runner times with steady_clock and adds
// the naive reference; the CUDA runner (built with CUDA only) times with CUDA events.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "flashattn/flashattn.h"
#include "plan_flags.h"
#include "report.h"
#include "timer.h"

namespace flashattn::bench {

struct RunSettings {
  Backend backend = Backend::Auto;  // passed to the library in every call
  std::string label;                // the "backend" column
  DType dtype = DType::BF16;
  int warmup = 1;
  int repeats = 3;
  bool naive = true;  // host only
  bool deterministic = false;  // backward mode
  std::size_t naive_max_bytes = std::size_t(1) << 30;
  int device = 0;  // CUDA only
  int decode_splits = 0;  // num_splits of the decode calls (see Options::num_splits)
  PlanFlags fa2_fwd_plan, fa2_bwd_plan, fa3_fwd_plan, fa3_bwd_plan;  // CUDA only: see Options
  std::string fa3_bwd_variant;                                      // CUDA only: see Options
};

class Runner {
 public:
  virtual ~Runner() = default;
  // A failed Status is the library's (or the CUDA runtime's) error; *row is then incomplete.
  virtual Status run(const Case& c, Row* row) = 0;
};

// Timing columns of a row from the samples of its case.
inline void set_timing(Row* row, const Timing& t, std::size_t element_bytes) {
  row->median_ms = t.median_ms;
  row->min_ms = t.min_ms;
  row->repeats = t.repeats;
  const double seconds = t.median_ms * 1e-3;
  row->tflops = seconds > 0 ? flops(row->c.shape, row->c.direction) / seconds * 1e-12 : 0;
  row->gbps = seconds > 0 ? min_bytes(row->c.shape, row->c.direction, element_bytes) / seconds * 1e-9 : 0;
}

std::unique_ptr<Runner> make_host_runner(const RunSettings& settings);
// Whether this benchmark was built with the CUDA runner (the library has GPU backends).
bool cuda_runner_built();
// nullptr when the benchmark was built without CUDA.
std::unique_ptr<Runner> make_cuda_runner(const RunSettings& settings);
// "NVIDIA H200 (sm_90, 132 SMs)"; built without CUDA: "".
std::string cuda_device_description(int device);

}  // namespace flashattn::bench
