// The FA2 forward's entry: the plan of a call (fwd_plan.h) mapped onto its instantiation, split-KV,
// the launch (and the combine when split).
#include <cuda_runtime.h>

#include <iterator>
#include <string>
#include <utility>

#include "common/cuda_status.h"
#include "common/pack_gqa.h"
#include "common/split_kv.h"
#include "fa2/device_limits.h"
#include "fa2/fa2_backend.h"
#include "fa2/fwd_kernel.cuh"
#include "fa2/fwd_plan.h"

namespace flashattn::fa2 {
namespace {

template <typename Config>
Status launch(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream) {
  auto kernel = fwd_kernel<Config>;
  // The kernel's shared-memory limit is the same for every call on a device (room for staged pages
  // wherever they fit, fwd_plan.h), so calls from several threads never race on it.
  const bool pages_fit = Config::kSmemBytes + Config::kPagesSmemBytes <= limits.smem_optin;
  const int smem_bytes = Config::kSmemBytes + (plan.stage_pages ? Config::kPagesSmemBytes : 0);
  FLASHATTN_CUDA_CHECK("fa2 fwd: raising the shared-memory limit",
                 cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      Config::kSmemBytes + (pages_fit ? Config::kPagesSmemBytes : 0)));
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (p.heads_q > 65535 || p.batch > 65535)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: more than 65535 heads or sequences per call");
  if (row_blocks == 0 || p.batch == 0) return {};
  int splits = p.num_splits;
  if (splits == 0) {
    int resident = 1;
    FLASHATTN_CUDA_CHECK("fa2 fwd: reading the occupancy",
                         cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, Config::kThreads,
                                                                       smem_bytes));
    splits = choose_fwd_splits({row_blocks * p.heads_q * p.batch, p.lens.seqlen_k, Config::kBlockN,
                                limits.multiprocessors, resident});
  }
  if (row_blocks * splits > 0x7fffffff)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: too many row blocks for one launch");
  const dim3 grid(unsigned(row_blocks * splits), unsigned(p.heads_q), unsigned(p.batch));

  SplitWorkspace ws;
  StreamBuffer buffer(stream);
  if (splits > 1) {
    ws.splits = splits;
    ws.total_rows = p.lens.total_q;
    const size_t out_elems = size_t(splits) * ws.total_rows * p.heads_q * p.head_dim_v;
    const size_t lse_elems = size_t(splits) * ws.total_rows * p.heads_q;
    if (Status st = buffer.allocate((out_elems + lse_elems) * sizeof(float), "fa2: allocating workspace"); !st.ok()) return st;
    ws.out_partial = buffer.as<float>();
    ws.lse_partial = ws.out_partial + out_elems;
  }
  kernel<<<grid, Config::kThreads, smem_bytes, stream>>>(p, ws, plan.stage_pages);
  FLASHATTN_CUDA_CHECK("fa2 fwd: launch", cudaGetLastError());
  if (splits > 1) {
    const CombineProblem partials = split_combine_problem(p, ws);
    if (!plan.combine_split_weights) return combine(partials, stream);
    const CombinePlan merge{CombineKernel::SplitWeights, combine_reads_float4(partials) ? 4 : 1};
    return combine(partials, stream, &merge);
  }
  return {};
}

// The instantiation of kFwdKernels[I] (fwd_plan.h), whose shared-memory rule must be the plan's.
template <typename Element, size_t I>
using KernelConfig = FwdConfig<Element, kFwdKernels[I].head_dim, kFwdKernels[I].block_m, kFwdKernels[I].block_n,
                               kFwdKernels[I].warps, kFwdKernels[I].dropout, kFwdKernels[I].general_score,
                               kFwdKernels[I].q_in_registers>;

template <typename Element, size_t I>
constexpr bool smem_rule_holds() {
  using Config = KernelConfig<Element, I>;
  const FwdPlan plan{Config::kHeadDim, Config::kBlockM, Config::kBlockN, Config::kWarps};
  return Config::kSmemBytes == fwd_smem_bytes(plan) && Config::kPagesSmemBytes == fwd_pages_smem_bytes(plan);
}

// Launches the kernel the plan names (check_fwd_plan found it in kFwdKernels).
template <typename Element, size_t... I>
Status launch_plan(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream,
                   std::index_sequence<I...>) {
  static_assert((smem_rule_holds<Element, I>() && ...), "fwd_smem_bytes (fwd_plan.h) must be FwdConfig's");
  Status st = Status::error(ErrorCode::Internal, "plan", "fa2 fwd: no kernel for the plan");
  (void)((same_kernel(kFwdKernels[I], plan) && ((st = launch<KernelConfig<Element, I>>(p, plan, limits, stream)), true)) ||
         ...);
  return st;
}

}  // namespace

Status fwd(const AttnProblem& problem, void* stream, const FwdPlan* forced_plan) {
  const auto s = static_cast<cudaStream_t>(stream);
  // Decoding with GQA: each KV tile is read once for all the query heads that share it.
  AttnProblem p = can_pack_gqa_rows(problem) ? pack_gqa_rows(problem) : problem;
  if ((p.k.block_table != nullptr || p.v.block_table != nullptr) &&
      (p.k.block_table != p.v.block_table || p.k.block_table_stride != p.v.block_table_stride ||
       p.k.page_size != p.v.page_size || p.k.row_offset != p.v.row_offset))
    return Status::error(ErrorCode::Unsupported, "block_table", "fa2 fwd: k and v must share one block table");  // (fwd_kernel.cuh)
  if (!clamp_windows_32(&p))
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: sequences of 2^30 rows or keys and more");
  if (p.dtype != DType::F16 && p.dtype != DType::BF16)
    // fp8 is FA3-only, as in FlashAttention-3 (and its kernels are not yet validated on a GPU).
    return Status::error(ErrorCode::Unsupported, "q",
                         std::string("argument 'q': the fa2 kernels take float16 or bfloat16 (float8_e4m3fn runs "
                                     "on the CPU backend; the FA3 fp8 kernels are not yet validated on a GPU), got ") +
                             dtype_name(p.dtype));
  DeviceLimits limits;
  if (Status st = device_limits(&limits, "fa2 fwd: reading the device"); !st.ok()) return st;
  const FwdPlan plan = forced_plan != nullptr ? *forced_plan : fwd_plan(problem, limits);
  if (Status st = check_fwd_plan(plan, problem, limits); !st.ok()) return st;
  constexpr auto kernels = std::make_index_sequence<std::size(kFwdKernels)>();
  return p.dtype == DType::F16 ? launch_plan<__half>(p, plan, limits, s, kernels)
                               : launch_plan<__nv_bfloat16>(p, plan, limits, s, kernels);
}

}  // namespace flashattn::fa2
