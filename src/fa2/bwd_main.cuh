// Launching the FA2 backward's main kernel for one (dtype, padded head dim, dropout, score path): the tile
// choice and the shared-memory check. Instantiated in bwd_hdim{64,128,256}.cu, so the head dims
// compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/cuda_status.h"
#include "fa2/bwd_kernel.cuh"
#include "fa2/device_limits.h"
#include "fa2/bwd_tuning.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// (kBlockM, kBlockN, warps) per padded head dim. d <= 128: 64 x 128 tiles, 8 warps of 16 keys
// that each hold all 64 rows of their S^T (P and dS feed dK/dV from registers); d256: 64 x 64,
// pairs of warps share 16 keys (half the rows of S^T, half the columns of dK/dV each). With two
// key tiles per warp (BwdTuning): 32 keys per warp, 2 (d <= 128) or 4 (d256) warps sharing them,
// and d64 takes 128 query rows per step (FA2's d64 tile: half the steps, each twice the MMAs).
template <typename Element, int kHeadDim, bool kDropout, int kStages, bool kGeneral, int kKeyTiles = 1,
          int kBlockM = 64>
using BwdConfigFor =
    BwdConfig<Element, kHeadDim, kBlockM, (kHeadDim <= 128 ? 128 : 64), 8, kStages, kDropout, kGeneral, kKeyTiles>;

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

// Picks two stages (Q/dO prefetch) when they fit in the GPU's shared memory, else one (d256 on
// GPUs with less than ~220 KB per block).
template <typename Element, int kHeadDim, bool kDropout, bool kGeneral>
Status launch_bwd_main(const BwdArgs& args, cudaStream_t stream) {
  DeviceLimits limits;
  if (Status st = device_limits(&limits, "fa2 bwd: reading the device"); !st.ok()) return st;
  const int smem_optin = limits.smem_optin;
  // Two key tiles per warp: the plain score path only (the general one spills at d128). d64
  // takes 128 rows per step where the shared memory allows (190 KB), else 64.
  if constexpr (!kDropout && !kGeneral) {
    using TwoKeyTiles = BwdConfigFor<Element, kHeadDim, false, 2, false, 2>;
    if (bwd_tuning().key_tiles != 1) {
      if constexpr (kHeadDim == 64) {
        using TallTiles = BwdConfigFor<Element, kHeadDim, false, 2, false, 2, 128>;
        if (bwd_tuning().block_m != 64 && TallTiles::kSmemBytes <= smem_optin)
          return launch_bwd_main_config<TallTiles>(args, stream);
      }
      if (TwoKeyTiles::kSmemBytes <= smem_optin) return launch_bwd_main_config<TwoKeyTiles>(args, stream);
    }
  }
  using TwoStages = BwdConfigFor<Element, kHeadDim, kDropout, 2, kGeneral>;
  if (TwoStages::kSmemBytes <= smem_optin) return launch_bwd_main_config<TwoStages>(args, stream);
  if constexpr (kHeadDim == 256) {
    using OneStage = BwdConfigFor<Element, kHeadDim, kDropout, 1, kGeneral>;
    if (OneStage::kSmemBytes <= smem_optin) return launch_bwd_main_config<OneStage>(args, stream);
  }
  return Status::error(ErrorCode::Unsupported, "q",
                       "fa2 bwd: head dim " + std::to_string(args.problem.fwd.head_dim) + " needs more shared memory per block (" +
                           std::to_string(TwoStages::kSmemBytes) + " bytes) than the GPU has (" +
                           std::to_string(smem_optin) + ")");
}

// (dropout, general score): the plain score path without dropout, the general one with and
// without (dropout takes the general path only, which keeps the instantiations down).
#define FLASHATTN_FA2_BWD_DECLARE(Element, kHeadDim)                                                     \
  extern template Status launch_bwd_main<Element, kHeadDim, false, false>(const BwdArgs&, cudaStream_t); \
  extern template Status launch_bwd_main<Element, kHeadDim, false, true>(const BwdArgs&, cudaStream_t);  \
  extern template Status launch_bwd_main<Element, kHeadDim, true, true>(const BwdArgs&, cudaStream_t);
#define FLASHATTN_FA2_BWD_INSTANTIATE(Element, kHeadDim)                                          \
  template Status launch_bwd_main<Element, kHeadDim, false, false>(const BwdArgs&, cudaStream_t); \
  template Status launch_bwd_main<Element, kHeadDim, false, true>(const BwdArgs&, cudaStream_t);  \
  template Status launch_bwd_main<Element, kHeadDim, true, true>(const BwdArgs&, cudaStream_t);

}  // namespace flashattn::fa2
