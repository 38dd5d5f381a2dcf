// Launch of the FA3 forward kernel a plan names (fwd_plan.h): the tensor maps of the call, then the
// kernel. Each fwd_hdim*.cu instantiates the kernels of one head dim (one translation unit each
// keeps the builds parallel).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "common/cuda_status.h"
#include "fa3/fwd_kernel.cuh"
#include "fa3/fwd_plan.h"
#include "fa3/launch_common.h"
#include "fa3/tile_order.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// Tensor maps of q, k, v for kBlockM-row Q boxes and kBlockN-row K/V boxes in swizzle_bytes
// boxes (map_rows; fp8 takes 64 where its tile does), and of out for TMA stores when the plan asks
// for them and the TMA can address it (fwd_launch.cu).
Status make_fwd_maps(const AttnProblem& p, int block_m, int block_n, bool tma_store_o, FwdMaps* maps, int swizzle_bytes = 128);

// The steps of a forward launch as its errors name them.
struct FwdLaunchSteps {
  const char *attribute, *allocate, *zero, *launch, *free;
};
inline constexpr FwdLaunchSteps kFwdSteps{"fa3 fwd", "fa3 fwd: allocating the tile counter", "fa3 fwd: zeroing the tile counter",
                                          "fa3 fwd: launch", "fa3 fwd: freeing the tile counter"};
inline constexpr FwdLaunchSteps kFp8FwdSteps{"fa3 fp8 fwd", "fa3 fp8 fwd: allocating the tile counter",
                                             "fa3 fp8 fwd: zeroing the tile counter", "fa3 fp8 fwd: launch",
                                             "fa3 fp8 fwd: freeing the tile counter"};

// Launches fwd_kernel<Config> on the call, 16-bit or fp8. Dense unmasked calls run on persistent
// CTAs, one per SM (the kernel fills an SM's shared memory), in the static order: their tiles are
// all alike, so a stride balances. Tiles of unequal length (causal, windowed, varlen, seqused_k)
// run in the dynamic order when `dynamic_order`: persistent CTAs take tiles from a counter in a
// stream-ordered allocation, zeroed before the launch; else a CTA per tile, which the hardware
// hands out as SMs free up (the dynamic order measured faster everywhere, docs/PERF.md).
// `section_mb` > 0 orders the dynamic tiles in sections of as many (sequence, head) pairs as
// have their K and V (the longest sequence's) in that many MiB: a GQA group's query heads share
// theirs.
template <typename Config>
Status launch_fwd_kernel(const AttnProblem& p, bool dynamic_order, int section_mb, bool tma_store_o, cudaStream_t stream) {
  constexpr const FwdLaunchSteps& kSteps = Config::kFp8 ? kFp8FwdSteps : kFwdSteps;
  // Nothing to compute (and a zero extent would make the tensor-map encode fail): return first.
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (row_blocks == 0 || p.batch == 0 || p.heads_q == 0) return {};
  const bool uniform = p.lens.cu_seqlens_q == nullptr && p.lens.seqused_k == nullptr && !p.mask.limits_keys();
  const bool dynamic = !uniform && dynamic_order;
  FwdGrid grid = fwd_grid(p, row_blocks);
  if (dynamic && section_mb > 0) {
    const int64_t kv_head_bytes =
        std::max<int64_t>(p.lens.seqlen_k, 1) * (p.head_dim + p.head_dim_v) * int64_t(sizeof(typename Config::Element));
    const int64_t fit = int64_t(section_mb) * (1 << 20) / kv_head_bytes * (p.heads_q / p.heads_k);
    grid.section_shift = section_shift_for(p.heads_q * p.batch, fit);
  }
  FwdMaps maps;
  if (Status st = make_fwd_maps(p, Config::kBlockM, Config::kBlockN, tma_store_o, &maps, Config::kQKSwizzle); !st.ok()) return st;
  auto kernel = fwd_kernel<Config>;
  FLASHATTN_CUDA_CHECK(kSteps.attribute, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes));
  const int64_t ctas = uniform || dynamic ? std::min<int64_t>(grid.work_tiles, sm_count()) : grid.work_tiles;
  StreamBuffer counter(stream);  // freed in stream order after the kernel
  if (dynamic && ctas < grid.work_tiles) {
    if (Status st = counter.allocate(sizeof(int), kSteps.allocate); !st.ok()) return st;
    FLASHATTN_CUDA_CHECK(kSteps.zero, cudaMemsetAsync(counter.as<int>(), 0, sizeof(int), stream));
    grid.tile_counter = counter.as<int>();
  }
  kernel<<<unsigned(ctas), Config::kThreads, Config::kSmemBytes, stream>>>(maps, p, grid);
  FLASHATTN_CUDA_CHECK(kSteps.launch, cudaGetLastError());
  return counter.free(kSteps.free);
}

// The 16-bit kernels always take the dynamic order for tiles of unequal length.
template <typename Config>
Status launch(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream) {
  return launch_fwd_kernel<Config>(p, /*dynamic_order=*/true, plan.section_mb, plan.tma_store_o, stream);
}

// The instantiation of kFwdKernels[I] (fwd_plan.h).
template <typename Element, size_t I>
using KernelConfig = FwdConfig<Element, kFwdKernels[I].head_dim, kFwdKernels[I].head_dim_v, kFwdKernels[I].block_n, 2,
                               kFwdKernels[I].general_score, kFwdKernels[I].pingpong, kFwdKernels[I].consumers>;

// Launches kFwdKernels[I] when it is the plan's and of these head dims.
template <typename Element, int kHeadDim, int kHeadDimV, size_t I>
bool launch_if_planned(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream, Status* st) {
  if constexpr (kFwdKernels[I].head_dim == kHeadDim && kFwdKernels[I].head_dim_v == kHeadDimV) {
    if (!same_kernel(kFwdKernels[I], plan)) return false;
    *st = launch<KernelConfig<Element, I>>(p, plan, stream);
    return true;
  } else {
    return false;
  }
}

template <typename Element, int kHeadDim, int kHeadDimV, size_t... I>
Status launch_plan_of(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream, std::index_sequence<I...>) {
  Status st = Status::error(ErrorCode::Internal, "plan", "fa3 fwd: no kernel for the plan");
  (void)(launch_if_planned<Element, kHeadDim, kHeadDimV, I>(p, plan, stream, &st) || ...);
  return st;
}

// The kernel of one (head dim, head dim v) that the plan names (check_fwd_plan found it).
template <int kHeadDim, int kHeadDimV>
Status launch_plan(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream) {
  constexpr auto kernels = std::make_index_sequence<std::size(kFwdKernels)>();
  return p.dtype == DType::F16 ? launch_plan_of<__half, kHeadDim, kHeadDimV>(p, plan, stream, kernels)
                               : launch_plan_of<__nv_bfloat16, kHeadDim, kHeadDimV>(p, plan, stream, kernels);
}

// Per head dim (the kernel's, after padding): fwd_hdim64.cu, fwd_hdim128.cu, ...
Status fwd_hdim64(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream);
Status fwd_hdim128(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream);
Status fwd_hdim192(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream);  // head_dim_v 192 or 128
Status fwd_hdim256(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream);

}  // namespace flashattn::fa3
