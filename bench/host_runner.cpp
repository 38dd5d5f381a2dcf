// Host tensors, steady_clock timing, and the naive reference beside the tiled forward.
#include <algorithm>
#include <cmath>

#include "api/validate.h"
#include "cpu/reference.h"
#include "params.h"
#include "runner.h"
#include "tensors.h"

namespace flashattn::bench {
namespace {

// The tensors of one case on the host.
struct HostCase {
  HostTensor q, k, v, out, lse;
  HostTensor dout, dq, dk, dv;  // backward only

  HostCase(const Shape& s, DType dtype, Direction direction, uint64_t seed)
      : q(dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}),
        k(dtype, {s.batch, s.seqlen_k, s.heads_k, s.head_dim}),
        v(dtype, {s.batch, s.seqlen_k, s.heads_k, s.head_dim}),
        out(dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}),
        lse(DType::F32, {s.batch, s.heads_q, s.seqlen_q}) {
    fill_random_normal(q.data(), dtype, q.numel(), seed + 1);
    fill_random_normal(k.data(), dtype, k.numel(), seed + 2);
    fill_random_normal(v.data(), dtype, v.numel(), seed + 3);
    if (direction == Direction::Bwd) {
      dout = HostTensor(dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
      dq = HostTensor(dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
      dk = HostTensor(dtype, {s.batch, s.seqlen_k, s.heads_k, s.head_dim});
      dv = HostTensor(dtype, {s.batch, s.seqlen_k, s.heads_k, s.head_dim});
      fill_random_normal(dout.data(), dtype, dout.numel(), seed + 4);
    }
  }

  AttentionViews views() const {
    return {q.view(), k.view(), v.view(), out.view(), lse.view(), dout.view(), dq.view(), dk.view(), dv.view()};
  }
  FwdParams fwd_params(const Shape& s, Backend backend) const { return make_fwd_params(s, views(), backend); }
  BwdParams bwd_params(const Shape& s, Backend backend) const { return make_bwd_params(s, views(), backend); }
};

class HostRunner final : public Runner {
 public:
  explicit HostRunner(const RunSettings& settings) : settings_(settings) {}

  Status run(const Case& c, Row* row) override {
    const Shape& s = c.shape;
    row->c = c;
    row->backend = settings_.label;
    row->dtype = dtype_name(settings_.dtype);
    HostCase t(s, settings_.dtype, c.direction, ++seed_ * 16);

    Status status;
    // Each call returns false on error so the timing loop stops at the first failure.
    auto timed_call = [&]() -> bool {
      status = c.direction == Direction::Fwd ? fwd(t.fwd_params(s, settings_.backend))
                                             : bwd(t.bwd_params(s, settings_.backend));
      return status.ok();
    };
    if (c.direction == Direction::Bwd) {
      // The backward needs the forward's out and lse; that forward is not timed.
      status = fwd(t.fwd_params(s, settings_.backend));
      if (!status.ok()) return status;
    }
    reset_cpu_workspace_peak();
    const auto samples = time_host(timed_call, settings_.warmup, settings_.repeats);
    if (!status.ok()) return status;
    set_timing(row, summarize(samples), dtype_size(settings_.dtype));
    row->extra_bytes = cpu_workspace_stats().peak_bytes;

    if (c.direction == Direction::Fwd) run_naive(s, t, row);
    return Status();
  }

 private:
  // The float64 reference materialises one seqlen_q x seqlen_k score matrix per (batch, head);
  // timed once (it is slow and its time varies little), and its output checks the tiled one.
  void run_naive(const Shape& s, const HostCase& t, Row* row) {
    if (!settings_.naive) return;
    const std::size_t score_bytes = std::size_t(s.seqlen_q) * std::size_t(s.seqlen_k) * sizeof(double);
    row->naive_score_bytes = score_bytes;
    if (score_bytes > settings_.naive_max_bytes) {
      row->naive_note = "naive skipped: scores exceed --naive-max-bytes";
      return;
    }
    HostTensor ref_out(DType::F32, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
    FwdParams params = t.fwd_params(s, Backend::Cpu);
    params.out = ref_out.view();
    params.softmax_lse = TensorView();
    AttnProblem problem;
    const Status status = api::make_fwd_problem(params, &problem, {.allow_f32_outputs = true});
    if (!status.ok()) {
      row->naive_note = "naive not run: " + status.message();
      return;
    }
    const auto samples = time_host(
        [&] {
          cpu::reference::fwd(problem, cpu::reference::Precision::Float64);
          return true;
        },
        0, 1);
    row->naive_ms = summarize(samples).median_ms;
    double worst = 0;
    for (int64_t i = 0; i < ref_out.numel(); ++i) {
      const double d = std::fabs(double(t.out.get(i)) - double(ref_out.get(i)));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      if (std::isinf(worst)) break;
    }
    row->max_abs_err = worst;
  }

  RunSettings settings_;
  uint64_t seed_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_host_runner(const RunSettings& settings) {
  return std::make_unique<HostRunner>(settings);
}

}  // namespace flashattn::bench
