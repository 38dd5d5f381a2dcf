// Device tensors, CUDA-event timing on a stream of our own. Compiled only when flashattn is built
// with CUDA (see bench/CMakeLists.txt).
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "api/fa3_bwd_forced.h"
#include "api/validate.h"
#include "cuda_tensors.h"
#include "fa2/fa2_backend.h"
#include "fa3/bwd_variant_names.h"
#include "fa3/fa3_backend.h"
#include "kvcache_layout.h"
#include "params.h"
#include "plan_flags.h"
#include "runner.h"
#include "tensors.h"

namespace flashattn::bench {
namespace {

// A plan the flags made that cannot run the call: the row is skipped with the library's reason.
Status skipped_plan(const Status& why) {
  return Status::error(ErrorCode::Unsupported, "plan", "the forced plan does not run this call: " + why.message());
}

// The flags' FA2 forward plan for a call (from the plan the library picks), checked on this device.
Status flagged_fa2_fwd_plan(const PlanFlags& flags, const AttnProblem& problem, fa2::FwdPlan* plan) {
  fa2::DeviceLimits limits;
  if (Status st = fa2::device_limits(&limits, "bench: reading the device"); !st.ok()) return st;
  *plan = apply_plan_flags(flags, fa2::fwd_plan(problem, limits), fa2::fwd_base_plan(problem, limits));
  if (Status st = fa2::check_fwd_plan(*plan, problem, limits); !st.ok()) return skipped_plan(st);
  return {};
}

// fp8 inputs on the FA3 backend: the fp8 kernels with fp8_fwd_plan's choice changed by
// --fa3-fwd-plan's flags, through the backend entry.
Status fp8_fwd(const FwdParams& params, const PlanFlags& flags, std::function<Status()>* call) {
  AttnProblem problem;
  if (Status st = api::make_fwd_problem(params, &problem); !st.ok()) return st;
  if (Status st = fa3::check_fp8(problem); !st.ok()) return st;
  const fa3::Fp8FwdPlan plan = apply_plan_flags(flags, fa3::fp8_fwd_plan(problem));
  // A plan the call cannot take is skipped, with the library's reason.
  if (Status st = fa3::check_fp8_fwd_plan(plan, problem); !st.ok()) return skipped_plan(st);
  *call = [problem, plan, stream = params.stream] { return fa3::fwd_fp8(problem, stream, &plan); };
  return {};
}

// The calls of one case, through the backend entries with the flags' plans where flags are given
// (checked once, before timing), else through the public API.
Status forced_fwd(const FwdParams& params, const RunSettings& settings, std::function<Status()>* call) {
  AttnProblem problem;
  if (Status st = api::make_fwd_problem(params, &problem); !st.ok()) return st;
  void* stream = params.stream;
  if (!settings.fa2_fwd_plan.empty()) {
    fa2::FwdPlan plan;
    if (Status st = flagged_fa2_fwd_plan(settings.fa2_fwd_plan, problem, &plan); !st.ok()) return st;
    *call = [problem, plan, stream] { return fa2::fwd(problem, stream, &plan); };
  } else {
    const fa3::FwdPlan plan = apply_plan_flags(settings.fa3_fwd_plan, fa3::fwd_plan(problem));
    if (Status st = fa3::check(problem); !st.ok()) return st;
    if (Status st = fa3::check_fwd_plan(plan, problem); !st.ok()) return skipped_plan(st);
    *call = [problem, plan, stream] { return fa3::fwd(problem, stream, &plan); };
  }
  return {};
}

class CudaRunner final : public Runner {
 public:
  explicit CudaRunner(const RunSettings& settings) : settings_(settings) {}
  ~CudaRunner() override {
    if (l2_flush_) cudaFree(l2_flush_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status run(const Case& c, Row* row) override {
    if (!stream_) {
      BENCH_CUDA_TRY(cudaSetDevice(settings_.device));
      BENCH_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    const Shape& s = c.shape;
    row->c = c;
    row->backend = settings_.label;
    row->dtype = dtype_name(settings_.dtype);
    if (s.kvcache) return run_kvcache(s, row);
    const DType dt = settings_.dtype;
    const DType out_dtype = dt == DType::F8E4M3 ? DType::BF16 : dt;  // fp8 attention writes bf16
    const int dev = settings_.device;
    const uint64_t seed = ++seed_ * 16;

    DeviceTensor q, k, v, out, lse, dout, dq, dk, dv;
    Status st;
    if (!(st = q.create(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, dev, seed + 1)).ok() ||
        !(st = k.create(dt, {s.batch, s.seqlen_k, s.heads_k, s.head_dim}, dev, seed + 2)).ok() ||
        !(st = v.create(dt, {s.batch, s.seqlen_k, s.heads_k, s.head_dim}, dev, seed + 3)).ok() ||
        !(st = out.create(out_dtype, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, dev, 0)).ok() ||
        !(st = lse.create(DType::F32, {s.batch, s.heads_q, s.seqlen_q}, dev, 0)).ok())
      return st;
    BENCH_CUDA_TRY(cudaDeviceSynchronize());  // the tensors' fills (see DeviceTensor)

    AttentionViews views;
    views.q = q.view();
    views.k = k.view();
    views.v = v.view();
    views.out = out.view();
    views.lse = lse.view();
    const FwdParams fp = make_fwd_params(s, views, settings_.backend, stream_, settings_.decode_splits);
    if (c.direction == Direction::Fwd) {
      std::function<Status()> call = [&] { return fwd(fp); };
      if (dt == DType::F8E4M3 && settings_.backend == Backend::Fa3) {
        if (Status st = fp8_fwd(fp, settings_.fa3_fwd_plan, &call); !st.ok()) return st;
      } else if (!settings_.fa2_fwd_plan.empty() || !settings_.fa3_fwd_plan.empty()) {
        if (Status st = forced_fwd(fp, settings_, &call); !st.ok()) return st;
      }
      return time_calls(call, row, /*flush_l2=*/false);
    }

    if (!(st = dout.create(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, dev, seed + 4)).ok() ||
        !(st = dq.create(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, dev, 0)).ok() ||
        !(st = dk.create(dt, {s.batch, s.seqlen_k, s.heads_k, s.head_dim}, dev, 0)).ok() ||
        !(st = dv.create(dt, {s.batch, s.seqlen_k, s.heads_k, s.head_dim}, dev, 0)).ok())
      return st;
    BENCH_CUDA_TRY(cudaDeviceSynchronize());
    // The backward needs the forward's out and lse; that forward is not timed.
    if (!(st = fwd(fp)).ok()) return st;
    views.dout = dout.view();
    views.dq = dq.view();
    views.dk = dk.view();
    views.dv = dv.view();
    const BwdParams bp = make_bwd_params(s, views, settings_.backend, stream_, settings_.deterministic);
    std::function<Status()> call = [&] { return bwd(bp); };
    if (!settings_.fa3_bwd_variant.empty() || !settings_.fa3_bwd_plan.empty()) {
      api::Fa3BwdOverride change;
      std::string why;
      if (!settings_.fa3_bwd_variant.empty()) change.kernel = *fa3::parse_bwd_kernel(settings_.fa3_bwd_variant, &why);  // (checked)
      const auto& values = settings_.fa3_bwd_plan.values;
      if (const auto it = values.find("section_mb"); it != values.end()) change.section_mb = it->second;
      if (const auto it = values.find("section_wave"); it != values.end()) change.section_per_wave = it->second != 0;
      if (const auto it = values.find("tma_store"); it != values.end()) change.tma_store_dkv = it->second != 0;
      if (const auto it = values.find("row_stagger"); it != values.end()) change.row_stagger = it->second;
      if (!(st = api::bwd_fa3_forced(bp, change)).ok()) return skipped_plan(st);
      call = [&bp, change] { return api::bwd_fa3_forced(bp, change); };
    }
    if (!settings_.fa2_bwd_plan.empty()) {
      BwdProblem problem;
      if (!(st = api::make_bwd_problem(bp, &problem)).ok()) return st;
      fa2::DeviceLimits limits;
      if (!(st = fa2::device_limits(&limits, "bench: reading the device")).ok()) return st;
      const fa2::BwdPlan plan = apply_plan_flags(settings_.fa2_bwd_plan, fa2::bwd_plan(problem, limits));
      if (!(st = fa2::check_bwd_plan(plan, problem, limits)).ok()) return skipped_plan(st);
      call = [problem, plan, stream = stream_] { return fa2::bwd(problem, stream, &plan); };
    }
    return time_calls(call, row, /*flush_l2=*/false);
  }

 private:
  // The cache, its block table and lengths live on the device, as in a serving engine.
  Status run_kvcache(const Shape& s, Row* row) {
    const KvCacheLayout layout = make_kvcache_layout(s);
    const DType dt = settings_.dtype;
    const int dev = settings_.device;
    const uint64_t seed = ++seed_ * 16;
    DeviceTensor q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, out, lse;
    Status st;
    if (!(st = q.create(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, dev, seed + 1)).ok() ||
        !(st = k_cache.create(dt, {layout.cache_rows, layout.keys_per_row, s.heads_k, s.head_dim}, dev, seed + 2))
             .ok() ||
        !(st = v_cache.create(dt, {layout.cache_rows, layout.keys_per_row, s.heads_k, s.head_dim}, dev, seed + 3))
             .ok() ||
        !(st = cache_seqlens.upload(int32_tensor(layout.cache_seqlens, {s.batch}), dev)).ok() ||
        !(st = out.create(dt, {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, dev, 0)).ok() ||
        !(st = lse.create(DType::F32, {s.batch, s.heads_q, s.seqlen_q}, dev, 0)).ok())
      return st;
    if (layout.seqlen_new > 0 &&
        (!(st = k_new.create(dt, {s.batch, layout.seqlen_new, s.heads_k, s.head_dim}, dev, seed + 4)).ok() ||
         !(st = v_new.create(dt, {s.batch, layout.seqlen_new, s.heads_k, s.head_dim}, dev, seed + 5)).ok()))
      return st;
    if (layout.pages_per_sequence > 0 &&
        !(st = block_table.upload(int32_tensor(layout.block_table, {s.batch, layout.pages_per_sequence}), dev)).ok())
      return st;
    BENCH_CUDA_TRY(cudaDeviceSynchronize());  // the tensors' fills (see DeviceTensor)

    const KvCacheViews views{q.view(),     k_cache.view(),     v_cache.view(), k_new.view(), v_new.view(),
                             cache_seqlens.view(), block_table.view(), out.view(),     lse.view()};
    const KvCacheParams params = make_kvcache_params(s, views, settings_.backend, stream_, settings_.decode_splits);
    std::function<Status()> call = [&] { return fwd_kvcache(params); };
    if (!settings_.fa3_fwd_plan.empty()) return Status::error(ErrorCode::Unsupported, "plan", "fa3 has no fwd_kvcache");
    if (!settings_.fa2_fwd_plan.empty()) {
      KvCacheProblem problem;
      if (!(st = api::make_kvcache_problem(params, &problem)).ok()) return st;
      fa2::FwdPlan plan;
      if (!(st = flagged_fa2_fwd_plan(settings_.fa2_fwd_plan, problem.attn, &plan)).ok()) return st;
      call = [problem, plan, stream = stream_] { return fa2::fwd_kvcache(problem, stream, &plan); };
    }
    // With append, every call writes the same k_new/v_new at the same positions: cache_seqlens
    // stays constant, so appending again is idempotent, the cache needs no reset between calls,
    // and every call does the same work without growing anything.
    return time_calls(call, row, /*flush_l2=*/true);
  }

  // Warm-up calls, then one event pair around each timed call; the events are read only after
  // the last call so the host never stalls the queue between calls. With flush_l2, a write over
  // a buffer larger than the L2 precedes each timed call, outside its events: a decode step reads
  // a cache that the rest of the model evicted from L2 since the last step, and a small cache
  // would otherwise be read from L2 by every repeat. (triton's do_bench, which FlashAttention-3's
  // benchmark uses, does the same.)
  template <typename Call>
  Status time_calls(Call&& call, Row* row, bool flush_l2) {
    for (int i = 0; i < settings_.warmup; ++i) {
      const Status st = call();
      if (!st.ok()) return st;
    }
    if (flush_l2) {
      const Status st = allocate_l2_flush();
      if (!st.ok()) return st;
    }
    std::vector<CudaEvent> starts(size_t(settings_.repeats)), stops(size_t(settings_.repeats));
    for (int i = 0; i < settings_.repeats; ++i) {
      BENCH_CUDA_TRY(starts[size_t(i)].error());
      BENCH_CUDA_TRY(stops[size_t(i)].error());
      if (flush_l2) BENCH_CUDA_TRY(cudaMemsetAsync(l2_flush_, 0, l2_flush_bytes_, stream_));
      BENCH_CUDA_TRY(cudaEventRecord(starts[size_t(i)].get(), stream_));
      const Status st = call();
      if (!st.ok()) return st;
      BENCH_CUDA_TRY(cudaEventRecord(stops[size_t(i)].get(), stream_));
    }
    BENCH_CUDA_TRY(cudaStreamSynchronize(stream_));
    std::vector<double> samples;
    for (int i = 0; i < settings_.repeats; ++i) {
      float ms = 0;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, starts[size_t(i)].get(), stops[size_t(i)].get()));
      samples.push_back(ms);
    }
    set_timing(row, summarize(samples), dtype_size(settings_.dtype));
    return Status();
  }

  // Twice the L2, at least 256 MiB (as triton's do_bench); allocated once per run.
  Status allocate_l2_flush() {
    if (l2_flush_) return Status();
    int l2_bytes = 0;
    BENCH_CUDA_TRY(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, settings_.device));
    l2_flush_bytes_ = std::max(std::size_t(2) * std::size_t(l2_bytes), std::size_t(256) << 20);
    BENCH_CUDA_TRY(cudaMalloc(&l2_flush_, l2_flush_bytes_));
    return Status();
  }

  RunSettings settings_;
  cudaStream_t stream_ = nullptr;
  void* l2_flush_ = nullptr;
  std::size_t l2_flush_bytes_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace

bool cuda_runner_built() { return true; }

std::unique_ptr<Runner> make_cuda_runner(const RunSettings& settings) {
  return std::make_unique<CudaRunner>(settings);
}

std::string cuda_device_description(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "cuda device " + std::to_string(device) + " (properties unavailable)";
  }
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
}

}  // namespace flashattn::bench
