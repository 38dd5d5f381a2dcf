// The FA2 backward: workspace, preprocess (D and LSE), main kernel (dK, dV, dQ accumulation),
// dQ conversion; everything enqueued on the caller's stream, no host synchronisation.
#include <cuda_runtime.h>

#include <string>

#include "cuda/bwd_convert_dq.cuh"
#include "cuda/bwd_row_stats.cuh"
#include "cuda/unused_key_grads.h"
#include "fa2/bwd_main.cuh"
#include "fa2/device_limits.h"
#include "fa2/fa2_backend.h"

namespace flashattn::fa2 {

FLASHATTN_FA2_BWD_DECLARE(__half, 64)
FLASHATTN_FA2_BWD_DECLARE(__half, 128)
FLASHATTN_FA2_BWD_DECLARE(__half, 256)
FLASHATTN_FA2_BWD_DECLARE(__nv_bfloat16, 64)
FLASHATTN_FA2_BWD_DECLARE(__nv_bfloat16, 128)
FLASHATTN_FA2_BWD_DECLARE(__nv_bfloat16, 256)

namespace {

// The FA2 dQ accumulator's slabs for the shared conversion (cuda/bwd_convert_dq.cuh).
struct DqSlabLayout {
  __device__ __forceinline__ DqQuad quad(int f, int dq_cols) const { return dq_slab_quad(f, dq_cols); }
};

template <typename Element>
Status launch_main(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  if (plan.head_dim == 64) return launch_bwd_main<Element, 64>(args, plan, stream);
  if (plan.head_dim == 128) return launch_bwd_main<Element, 128>(args, plan, stream);
  return launch_bwd_main<Element, 256>(args, plan, stream);
}

template <typename Element>
Status run_kernels(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  FLASHATTN_CUDA_CHECK("fa2 bwd: preprocess kernel launch",
                       gpu::launch_bwd_row_stats<Element>(
                           args.problem, {args.lse_log2, args.delta, args.rows_padded, args.dq_accum, args.dq_cols}, stream));
  const Status st = launch_main<Element>(args, plan, stream);
  if (!st.ok()) return st;
  FLASHATTN_CUDA_CHECK("fa2 bwd: dq convert kernel launch",
                       gpu::launch_bwd_convert_dq<Element>(args.problem, args.dq_accum, args.rows_padded, args.dq_cols,
                                                           DqSlabLayout{}, args.dq_scale, stream));
  return {};
}

Status unsupported(const char* argument, const std::string& message) {
  return Status::error(ErrorCode::Unsupported, argument, std::string("argument '") + argument + "': " + message);
}

}  // namespace

Status bwd(const BwdProblem& problem, void* stream_ptr, const BwdPlan* forced_plan) {
  const AttnProblem& p = problem.fwd;
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.dtype != DType::F16 && p.dtype != DType::BF16)
    return unsupported("q", std::string("the fa2 backward takes float16 or bfloat16, got ") + dtype_name(p.dtype));
  if (p.out_dtype != p.dtype)
    return unsupported("dq", std::string("the fa2 backward writes gradients in the dtype of q (") + dtype_name(p.dtype) +
                                 "), got " + dtype_name(p.out_dtype));
  if (problem.dout_dtype != p.dtype)
    return unsupported("dout", std::string("the fa2 backward needs dout in the dtype of q (") + dtype_name(p.dtype) +
                                   "), got " + dtype_name(problem.dout_dtype));
  if (p.heads_q > 65535 || p.batch > 65535)
    return unsupported("q", "the fa2 backward takes at most 65535 heads and 65535 sequences per call");
  if (p.batch == 0) return {};

  BwdArgs args;
  args.problem = problem;
  if (!clamp_windows_32(&args.problem.fwd))
    return unsupported("q", "the fa2 backward takes sequences below 2^30 rows and keys");
  DeviceLimits limits;
  if (Status st = device_limits(&limits, "fa2 bwd: reading the device"); !st.ok()) return st;
  const BwdPlan plan = forced_plan != nullptr ? *forced_plan : bwd_plan(problem, limits);
  if (Status st = check_bwd_plan(plan, problem, limits); !st.ok()) return st;
  args.deterministic = problem.deterministic;
  args.dq_scale = plan.general_score ? 1.f : p.score.scale;  // see BwdArgs::dq_scale
  args.dq_cols = plan.head_dim;
  args.dq_bulk = plan.dq_bulk;
  args.rotate_rows = true;
  const int64_t rows = p.lens.seqlen_q > 0 ? p.lens.seqlen_q : 1;
  args.rows_padded = (rows + kBwdRowAlign - 1) / kBwdRowAlign * kBwdRowAlign;

  // One allocation: [lse_log2 | delta | dq_accum | dq_counters]; the last two start zeroed (the
  // accumulator by the row statistics kernel: its 16-row tiles keep rows in order).
  const size_t row_slots = size_t(p.batch) * size_t(p.heads_q) * size_t(args.rows_padded);
  const size_t lse_bytes = row_slots * sizeof(float);
  const size_t accum_bytes = row_slots * size_t(args.dq_cols) * sizeof(float);
  const size_t counter_bytes = row_slots / kBwdMinBlockM * sizeof(int);
  StreamBuffer workspace(stream);  // freed in stream order after the kernels, also when a launch fails
  if (Status st = workspace.allocate(2 * lse_bytes + accum_bytes + counter_bytes, "fa2 bwd: allocating the workspace"); !st.ok())
    return st;
  char* base = workspace.as<char>();
  args.lse_log2 = reinterpret_cast<float*>(base);
  args.delta = reinterpret_cast<float*>(base + lse_bytes);
  args.dq_accum = reinterpret_cast<float*>(base + 2 * lse_bytes);
  args.dq_counters = reinterpret_cast<int*>(base + 2 * lse_bytes + accum_bytes);

  FLASHATTN_CUDA_CHECK("fa2 bwd: zeroing the counters", cudaMemsetAsync(args.dq_counters, 0, counter_bytes, stream));
  const Status st =
      p.dtype == DType::F16 ? run_kernels<__half>(args, plan, stream) : run_kernels<__nv_bfloat16>(args, plan, stream);
  if (!st.ok()) return st;
  if (Status zeroed = zero_unused_key_grads(problem, stream); !zeroed.ok()) return zeroed;
  return workspace.free("fa2 bwd: freeing the workspace");
}

}  // namespace flashattn::fa2
