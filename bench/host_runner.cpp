// Host tensors, steady_clock timing, and the naive reference beside the tiled forward.
#include <algorithm>
#include <cmath>

#include "api/validate.h"
#include "cpu/reference.h"
#include "kvcache_layout.h"
#include "params.h"
#include "runner.h"
#include "tensors.h"

namespace flashattn::bench {
namespace {

// The tensors of one fwd/bwd case on the host.
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
  FwdParams fwd_params(const Shape& s, Backend backend, int decode_splits = 0) const {
    return make_fwd_params(s, views(), backend, nullptr, decode_splits);
  }
  BwdParams bwd_params(const Shape& s, Backend backend) const { return make_bwd_params(s, views(), backend); }
};

// The tensors of one fwd_kvcache case on the host.
struct HostKvCacheCase {
  KvCacheLayout layout;
  HostTensor q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, out, lse;

  HostKvCacheCase(const Shape& s, DType dtype, uint64_t seed)
      : layout(make_kvcache_layout(s)),
        q(dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}),
        k_cache(dtype, {layout.cache_rows, layout.keys_per_row, s.heads_k, s.head_dim}),
        v_cache(dtype, {layout.cache_rows, layout.keys_per_row, s.heads_k, s.head_dim}),
        cache_seqlens(int32_tensor(layout.cache_seqlens, {s.batch})),
        out(dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}),
        lse(DType::F32, {s.batch, s.heads_q, s.seqlen_q}) {
    fill_random_normal(q.data(), dtype, q.numel(), seed + 1);
    fill_random_normal(k_cache.data(), dtype, k_cache.numel(), seed + 2);
    fill_random_normal(v_cache.data(), dtype, v_cache.numel(), seed + 3);
    if (layout.seqlen_new > 0) {
      k_new = HostTensor(dtype, {s.batch, layout.seqlen_new, s.heads_k, s.head_dim});
      v_new = HostTensor(dtype, {s.batch, layout.seqlen_new, s.heads_k, s.head_dim});
      fill_random_normal(k_new.data(), dtype, k_new.numel(), seed + 4);
      fill_random_normal(v_new.data(), dtype, v_new.numel(), seed + 5);
    }
    if (layout.pages_per_sequence > 0)
      block_table = int32_tensor(layout.block_table, {s.batch, layout.pages_per_sequence});
  }

  KvCacheParams params(const Shape& s, Backend backend, int decode_splits = 0) const {
    const KvCacheViews views{q.view(),     k_cache.view(), v_cache.view(), k_new.view(), v_new.view(),
                             cache_seqlens.view(), block_table.view(), out.view(), lse.view()};
    return make_kvcache_params(s, views, backend, nullptr, decode_splits);
  }
};

class HostRunner final : public Runner {
 public:
  explicit HostRunner(const RunSettings& settings) : settings_(settings) {}

  Status run(const Case& c, Row* row) override {
    const Shape& s = c.shape;
    row->c = c;
    row->backend = settings_.label;
    row->dtype = dtype_name(settings_.dtype);
    if (s.kvcache) return run_kvcache(s, row);
    HostCase t(s, settings_.dtype, c.direction, ++seed_ * 16);

    Status status;
    // Each call returns false on error so the timing loop stops at the first failure.
    auto timed_call = [&]() -> bool {
      status = c.direction == Direction::Fwd ? fwd(t.fwd_params(s, settings_.backend, settings_.decode_splits))
                                             : bwd(t.bwd_params(s, settings_.backend));
      return status.ok();
    };
    if (c.direction == Direction::Bwd) {
      // The backward needs the forward's out and lse; that forward is not timed.
      status = fwd(t.fwd_params(s, settings_.backend, settings_.decode_splits));
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
  Status run_kvcache(const Shape& s, Row* row) {
    HostKvCacheCase t(s, settings_.dtype, ++seed_ * 16);
    const KvCacheParams params = t.params(s, settings_.backend, settings_.decode_splits);
    // With append, every call writes the same k_new/v_new at the same positions (cache_seqlens
    // stays), so the cache needs no reset between calls and each call does the same work.
    Status status;
    reset_cpu_workspace_peak();
    const auto samples = time_host(
        [&] {
          status = fwd_kvcache(params);
          return status.ok();
        },
        settings_.warmup, settings_.repeats);
    if (!status.ok()) return status;
    set_timing(row, summarize(samples), dtype_size(settings_.dtype));
    row->extra_bytes = cpu_workspace_stats().peak_bytes;
    run_naive(s, t, row);
    return Status();
  }

  // The float64 reference materialises one seqlen_q x seqlen_k score matrix per (batch, head);
  // timed once (it is slow and its time varies little), and its output checks the tiled one.
  void run_naive(const Shape& s, const HostCase& t, Row* row) {
    if (!naive_fits(s, row)) return;
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
    time_and_compare([&] { cpu::reference::fwd(problem, cpu::reference::Precision::Float64); }, t.out, ref_out,
                     row);
  }

  // The reference appends k_new/v_new again: the same keys at the same positions as the timed calls.
  void run_naive(const Shape& s, const HostKvCacheCase& t, Row* row) {
    if (!naive_fits(s, row)) return;
    HostTensor ref_out(DType::F32, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
    KvCacheParams params = t.params(s, Backend::Cpu);
    params.out = ref_out.view();
    params.softmax_lse = TensorView();
    KvCacheProblem problem;
    const Status status = api::make_kvcache_problem(params, &problem, {.allow_f32_outputs = true});
    if (!status.ok()) {
      row->naive_note = "naive not run: " + status.message();
      return;
    }
    time_and_compare([&] { cpu::reference::fwd_kvcache(problem, cpu::reference::Precision::Float64); }, t.out,
                     ref_out, row);
  }

  // Whether the naive reference runs for this shape; says why not in the row when it does not.
  bool naive_fits(const Shape& s, Row* row) const {
    if (!settings_.naive) return false;
    const std::size_t score_bytes = std::size_t(s.seqlen_q) * std::size_t(s.seqlen_k) * sizeof(double);
    row->naive_score_bytes = score_bytes;
    if (score_bytes > settings_.naive_max_bytes) {
      row->naive_note = "naive skipped: scores exceed --naive-max-bytes";
      return false;
    }
    return true;
  }

  template <typename Reference>
  static void time_and_compare(Reference&& reference, const HostTensor& out, const HostTensor& ref_out, Row* row) {
    const auto samples = time_host(
        [&] {
          reference();
          return true;
        },
        0, 1);
    row->naive_ms = summarize(samples).median_ms;
    double worst = 0;
    for (int64_t i = 0; i < ref_out.numel(); ++i) {
      const double d = std::fabs(double(out.get(i)) - double(ref_out.get(i)));
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
