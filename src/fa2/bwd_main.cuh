// Launching the FA2 backward's main kernel that a plan names (bwd_plan.h), for one (dtype, padded
// head dim). Instantiated in bwd_hdim{64,128,256}.cu, so the head dims compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <iterator>
#include <utility>

#include "common/cuda_status.h"
#include "fa2/bwd_kernel.cuh"
#include "fa2/bwd_plan.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// The instantiation of kBwdKernels[I] (bwd_plan.h): d <= 128 takes 128 keys per CTA, 8 warps of
// 16 keys (one key tile) that each hold all 64 rows of their S^T (P and dS feed dK/dV from
// registers), or of 32 keys (two key tiles) in pairs; d256 64 keys, pairs (one key tile) or
// quadruples (two) of warps sharing them.
template <typename Element, size_t I>
using BwdKernelConfig =
    BwdConfig<Element, kBwdKernels[I].head_dim, kBwdKernels[I].block_m, bwd_block_n(kBwdKernels[I].head_dim), 8,
              kBwdKernels[I].stages, kBwdKernels[I].dropout, kBwdKernels[I].general_score, kBwdKernels[I].key_tiles>;

template <typename Element, size_t I>
constexpr bool bwd_smem_rule_holds() {
  using Config = BwdKernelConfig<Element, I>;
  const BwdPlan plan{Config::kHeadDim, Config::kBlockM, Config::kKeyTiles, Config::kStages};
  return Config::kSmemBytes == bwd_smem_bytes(plan) && Config::kBlockN == bwd_block_n(Config::kHeadDim) &&
         Config::kWarps == 8;
}

template <typename Config>
Status launch_bwd_main_config(const BwdArgs& args, cudaStream_t stream) {
  const AttnProblem& p = args.problem.fwd;
  // The kernel lays dq_accum out by its own head dim (dq_tile_index).
  if (args.dq_cols != Config::kHeadDim)
    return Status::error(ErrorCode::Internal, "dq", "fa2 bwd: dQ workspace width does not match the kernel's head dim");
  auto kernel = bwd_main_kernel<Config>;
  FLASHATTN_CUDA_CHECK("fa2 bwd: raising the shared-memory limit",
                       cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes));
  const int64_t key_blocks = (p.lens.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  if (key_blocks == 0 || p.batch == 0) return {};
  const dim3 grid(unsigned(key_blocks), unsigned(p.heads_k), unsigned(p.batch));
  kernel<<<grid, Config::kThreads, Config::kSmemBytes, stream>>>(args);
  return cuda_status("fa2 bwd: main kernel launch", cudaGetLastError());
}

// Launches kBwdKernels[I] when it is the plan's and of this head dim.
template <typename Element, int kHeadDim, size_t I>
bool launch_if_planned(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream, Status* st) {
  if constexpr (kBwdKernels[I].head_dim == kHeadDim) {
    static_assert(bwd_smem_rule_holds<Element, I>(), "bwd_smem_bytes (bwd_plan.h) must be BwdConfig's");
    if (!same_kernel(kBwdKernels[I], plan)) return false;
    *st = launch_bwd_main_config<BwdKernelConfig<Element, I>>(args, stream);
    return true;
  } else {
    return false;
  }
}

// The main kernel of one (dtype, head dim) that the plan names (check_bwd_plan found it).
template <typename Element, int kHeadDim, size_t... I>
Status launch_bwd_main_of(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream, std::index_sequence<I...>) {
  Status st = Status::error(ErrorCode::Internal, "plan", "fa2 bwd: no kernel for the plan");
  (void)(launch_if_planned<Element, kHeadDim, I>(args, plan, stream, &st) || ...);
  return st;
}

template <typename Element, int kHeadDim>
Status launch_bwd_main(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_main_of<Element, kHeadDim>(args, plan, stream, std::make_index_sequence<std::size(kBwdKernels)>());
}

#define FLASHATTN_FA2_BWD_DECLARE(Element, kHeadDim) \
  extern template Status launch_bwd_main<Element, kHeadDim>(const BwdArgs&, const BwdPlan&, cudaStream_t);
#define FLASHATTN_FA2_BWD_INSTANTIATE(Element, kHeadDim) \
  template Status launch_bwd_main<Element, kHeadDim>(const BwdArgs&, const BwdPlan&, cudaStream_t);

}  // namespace flashattn::fa2
