// The FA2 forward's launch of one kernel plan (fwd_plan.h): split-KV, the launch and the combine
// when split. Shared by fwd_launch.cu (kFwdKernels) and fwd_launch_packed.cu (the kernels that
// pack query heads into rows, kFwdPackedQueryKernels), one translation unit per kernel list.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "arch/sm90/cluster.cuh"
#include "arch/sm90/grid_dependency.cuh"
#include "common/cuda_status.h"
#include "common/pack_gqa.h"
#include "common/split_kv.h"
#include "fa2/device_limits.h"
#include "fa2/fa2_backend.h"
#include "fa2/fwd_kernel.cuh"
#include "fa2/fwd_plan.h"

namespace flashattn::fa2 {

// Launches a plan of kFwdPackedQueryKernels (fwd_launch_packed.cu) on the call as the API made it
// (query heads not packed by pack_gqa_rows).
Status launch_packed_query_plan(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream);

namespace fwd_launch {


template <typename Config>
Status launch(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream) {
  auto kernel = fwd_kernel<Config>;
  // The kernel's shared-memory limit is the same for every call on a device (room for staged pages
  // wherever they fit, fwd_plan.h), so calls from several threads never race on it.
  // (The decode tiles' limit also covers a cluster launch's reservation of half the SM: see below.)
  const bool pages_fit = Config::kSmemBytes + Config::kPagesSmemBytes <= limits.smem_optin;
  const int smem_bytes = Config::kSmemBytes + (plan.stage_pages ? Config::kPagesSmemBytes : 0);
  const int one_per_sm_bytes = limits.smem_optin / 2 + 1;
  const int smem_limit = std::max(Config::kSmemBytes + (pages_fit ? Config::kPagesSmemBytes : 0),
                                  Config::kWarpsSplitKeys && limits.arch >= 90 ? one_per_sm_bytes : 0);
  FLASHATTN_CUDA_CHECK("fa2 fwd: raising the shared-memory limit",
                       cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit));
  // Packed query heads: G x seqlen_q rows per KV head, one CTA row per KV head.
  const QueryRowPack pack = Config::kPackGqa ? query_row_pack(p) : QueryRowPack{};
  const int64_t rows = Config::kPackGqa ? int64_t(pack.rows) : p.lens.seqlen_q;
  const int64_t heads = Config::kPackGqa ? p.heads_k : p.heads_q;
  const int64_t row_blocks = (rows + Config::kBlockM - 1) / Config::kBlockM;
  if (p.heads_q > 65535 || p.batch > 65535)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: more than 65535 heads or sequences per call");
  if (row_blocks == 0 || p.batch == 0) return {};
  int splits = p.num_splits;
  if (splits == 0) {
    int resident = 1;
    FLASHATTN_CUDA_CHECK("fa2 fwd: reading the occupancy",
                         cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, Config::kThreads,
                                                                       smem_bytes));
    splits = choose_fwd_splits({row_blocks * heads * p.batch, p.lens.seqlen_k, Config::kBlockN,
                                limits.multiprocessors, resident, Config::kWarpsSplitKeys});
  }
  // Split in clusters (FwdPlan::split_in_cluster): a forced count of at most a cluster's size, or
  // the rule's count where it is above that, capped at it (a forced count above it splits
  // through global memory), where the device holds one. Where
  // the grid has no more CTAs than the GPU has SMs (FwdPlan::cluster_one_per_sm) and the GPCs
  // then hold every cluster at once (a cluster's CTAs share one GPC), each CTA reserves over
  // half an SM's shared memory, so that no two share an SM while others stay idle.
  bool in_cluster = false;
  int launch_smem_bytes = smem_bytes;
  if (Config::kWarpsSplitKeys && plan.split_in_cluster && limits.arch >= 90 && splits > 1 &&
      (p.num_splits == 0 ? splits > kMaxClusterSplits : splits <= kMaxClusterSplits)) {
    const int cluster_splits = std::min(splits, kMaxClusterSplits);
    if (cluster_splits > 8) FLASHATTN_CUDA_CHECK("fa2 fwd: allowing 16-CTA clusters", sm90::allow_large_clusters(kernel));
    const int64_t grid_clusters = row_blocks * heads * p.batch;
    const auto holds = [&](int bytes, int64_t wanted) -> Status {
      int clusters = 0;
      if (Status st = cluster_capacity(reinterpret_cast<const void*>(kernel), cluster_splits, Config::kThreads, bytes, &clusters);
          !st.ok())
        return st;
      if (!in_cluster && clusters >= wanted) {
        in_cluster = true;
        launch_smem_bytes = bytes;
      }
      return {};
    };
    if (plan.cluster_one_per_sm && grid_clusters * cluster_splits <= limits.multiprocessors)
      if (Status st = holds(std::max(smem_bytes, one_per_sm_bytes), grid_clusters); !st.ok()) return st;
    if (!in_cluster)
      if (Status st = holds(smem_bytes, 1); !st.ok()) return st;
    if (in_cluster) splits = cluster_splits;
  }
  if (row_blocks * splits > 0x7fffffff)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: too many row blocks for one launch");
  const dim3 grid(unsigned(row_blocks * splits), unsigned(heads), unsigned(p.batch));

  SplitWorkspace ws;
  StreamBuffer buffer(stream);
  if (in_cluster) {
    ws.splits = splits;
    ws.in_cluster = true;
    FLASHATTN_CUDA_CHECK("fa2 fwd: launch in clusters",
                         sm90::launch_in_clusters(kernel, grid, dim3(Config::kThreads), size_t(launch_smem_bytes), stream, unsigned(splits),
                                                  true, p, ws, bool(plan.stage_pages), pack));
    return {};
  }
  if (splits > 1) {
    ws.splits = splits;
    ws.total_rows = p.lens.total_q;
    const size_t out_elems = size_t(splits) * ws.total_rows * p.heads_q * p.head_dim_v;
    const size_t lse_elems = size_t(splits) * ws.total_rows * p.heads_q;
    if (Status st = buffer.allocate((out_elems + lse_elems) * sizeof(float), "fa2: allocating workspace"); !st.ok()) return st;
    ws.out_partial = buffer.as<float>();
    ws.lse_partial = ws.out_partial + out_elems;
  }
  // sm90: a programmatic dependent of the kernel before it (a decode step's append or rotary
  // kernel lets it launch early; the kernel waits for their writes first).
  FLASHATTN_CUDA_CHECK("fa2 fwd: launch",
                       sm90::launch_maybe_dependent(kernel, grid, dim3(Config::kThreads), size_t(smem_bytes), stream,
                                                    limits.arch >= 90, p, ws, bool(plan.stage_pages), pack));
  if (splits > 1) return combine(split_combine_problem(p, ws), stream);
  return {};
}

// The instantiation of kernels[I] (a list of fwd_plan.h), whose shared-memory rule must be the
// plan's; kPacked: the list packs query heads into rows.
template <typename Element, const auto& kernels, size_t I, bool kPacked>
using KernelConfig = FwdConfig<Element, kernels[I].head_dim, kernels[I].block_m, kernels[I].block_n, kernels[I].warps,
                               kernels[I].dropout, kernels[I].general_score, kernels[I].q_in_registers, kPacked>;

template <typename Element, const auto& kernels, size_t I, bool kPacked>
constexpr bool smem_rule_holds() {
  using Config = KernelConfig<Element, kernels, I, kPacked>;
  const FwdPlan plan{Config::kHeadDim, Config::kBlockM, Config::kBlockN, Config::kWarps};
  return Config::kSmemBytes == fwd_smem_bytes(plan) && Config::kPagesSmemBytes == fwd_pages_smem_bytes(plan);
}

// Launches the kernel the plan names (check_fwd_plan found it in `kernels`).
template <typename Element, const auto& kernels, bool kPacked, size_t... I>
Status launch_plan(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream,
                   std::index_sequence<I...>) {
  static_assert((smem_rule_holds<Element, kernels, I, kPacked>() && ...), "fwd_smem_bytes (fwd_plan.h) must be FwdConfig's");
  Status st = Status::error(ErrorCode::Internal, "plan", "fa2 fwd: no kernel for the plan");
  (void)((same_kernel(kernels[I], plan) &&
          ((st = launch<KernelConfig<Element, kernels, I, kPacked>>(p, plan, limits, stream)), true)) ||
         ...);
  return st;
}

// launch_plan over a whole kernel list, by the call's element type.
template <const auto& kernels, bool kPacked>
Status launch_from(const AttnProblem& p, const FwdPlan& plan, const DeviceLimits& limits, cudaStream_t stream) {
  constexpr auto all = std::make_index_sequence<std::size(kernels)>();
  return p.dtype == DType::F16 ? launch_plan<__half, kernels, kPacked>(p, plan, limits, stream, all)
                               : launch_plan<__nv_bfloat16, kernels, kPacked>(p, plan, limits, stream, all);
}

}  // namespace fwd_launch
}  // namespace flashattn::fa2
