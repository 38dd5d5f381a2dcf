// Launch of one FA3 fp8 forward configuration (Fp8FwdConfig): the tensor maps of the call, the
// schedule of its plan, then the shared forward kernel (fwd_kernel.cuh). Each fp8_fwd_hdim*.cu
// instantiates the tiles of one head dim (fp8_fwd_tiles.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "common/cuda_status.h"
#include "fa3/fp8_fwd_config.h"
#include "fa3/fp8_fwd_plan.h"
#include "fa3/fp8_fwd_tiles.h"
#include "fa3/fwd_kernel.cuh"
#include "fa3/fwd_launch.cuh"
#include "fa3/launch_common.h"
#include "fa3/tile_order.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// The schedule as the 16-bit launch (fwd_launch.cuh) makes it, from the plan's choices: dense
// unmasked calls on persistent CTAs in the static order; tiles of unequal length on persistent
// CTAs in the dynamic order (plan.dynamic_schedule), else a CTA per tile.
template <typename Config>
Status launch_fp8(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan) {
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (row_blocks == 0 || p.batch == 0 || p.heads_q == 0) return {};
  const bool uniform = p.lens.cu_seqlens_q == nullptr && p.lens.seqused_k == nullptr && !p.mask.limits_keys();
  const bool dynamic = !uniform && plan.dynamic_schedule;
  FwdGrid grid = fwd_grid(p, row_blocks);
  if (dynamic && plan.section_mb > 0) {
    const int64_t kv_head_bytes = std::max<int64_t>(p.lens.seqlen_k, 1) * (p.head_dim + p.head_dim_v);
    const int64_t fit = int64_t(plan.section_mb) * (1 << 20) / kv_head_bytes * (p.heads_q / p.heads_k);
    grid.section_shift = section_shift_for(p.heads_q * p.batch, fit);
  }
  // check_fp8_fwd_plan's rule for TMA stores of O holds for this configuration's V stages.
  static_assert(!fp8_o_fits_v_stages(Config::kBlockM, Config::kBlockN) || Config::kOBytes <= Config::kStages * Config::kVBytes);
  FwdMaps maps;
  if (Status st = make_fwd_maps(p, Config::kBlockM, Config::kBlockN, plan.tma_store_o, &maps, Config::kQKSwizzle); !st.ok())
    return st;
  auto kernel = fwd_kernel<Config>;
  FLASHATTN_CUDA_CHECK("fa3 fp8 fwd", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes));
  const int64_t ctas = uniform || dynamic ? std::min<int64_t>(grid.work_tiles, sm_count()) : grid.work_tiles;
  StreamBuffer counter(stream);
  if (dynamic && ctas < grid.work_tiles) {
    if (Status st = counter.allocate(sizeof(int), "fa3 fp8 fwd: allocating the tile counter"); !st.ok()) return st;
    FLASHATTN_CUDA_CHECK("fa3 fp8 fwd: zeroing the tile counter", cudaMemsetAsync(counter.as<int>(), 0, sizeof(int), stream));
    grid.tile_counter = counter.as<int>();
  }
  kernel<<<unsigned(ctas), Config::kThreads, Config::kSmemBytes, stream>>>(maps, p, grid);
  FLASHATTN_CUDA_CHECK("fa3 fp8 fwd: launch", cudaGetLastError());
  return counter.free("fa3 fp8 fwd: freeing the tile counter");
}

// Runs the plan's tile among kFp8Tiles[kIndices...] (those of one head dim), in the call's output
// dtype; Unsupported naming "plan" when no built tile matches.
template <int... kIndices>
Status launch_fp8_tile(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan, std::integer_sequence<int, kIndices...>) {
  Status result = Status::error(ErrorCode::Unsupported, "plan", "fa3 fp8 fwd: no kernel is built for this plan (fp8_fwd_tiles.h)");
  auto try_tile = [&](auto index) {
    constexpr Fp8Tile t = kFp8Tiles[decltype(index)::value];
    if (plan.head_dim != t.head_dim || plan.block_m != t.block_m || plan.block_n != t.block_n ||
        plan.general_score != t.general_score || plan.pingpong != t.pingpong || plan.no_key_limits != t.no_key_limits)
      return false;
    constexpr int kConsumers = t.block_m / 64;
    using Bf16 = Fp8FwdConfig<__nv_bfloat16, t.head_dim, t.block_n, 2, t.general_score, t.pingpong, kConsumers, t.no_key_limits>;
    using F16 = Fp8FwdConfig<__half, t.head_dim, t.block_n, 2, t.general_score, t.pingpong, kConsumers, t.no_key_limits>;
    result = p.out_dtype == DType::F16 ? launch_fp8<F16>(p, stream, plan) : launch_fp8<Bf16>(p, stream, plan);
    return true;
  };
  (try_tile(std::integral_constant<int, kIndices>{}) || ...);
  return result;
}

// The indices of kFp8Tiles with head dim kHeadDim: count first, then the indices.
template <int kHeadDim>
constexpr std::array<int, kFp8TileCount + 1> fp8_tiles_of() {
  std::array<int, kFp8TileCount + 1> found{};
  for (int i = 0; i < kFp8TileCount; ++i)
    if (kFp8Tiles[i].head_dim == kHeadDim) found[1 + found[0]++] = i;
  return found;
}

template <int kHeadDim>
Status launch_fp8_head_dim(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan) {
  static constexpr std::array<int, kFp8TileCount + 1> kFound = fp8_tiles_of<kHeadDim>();
  return [&]<int... kI>(std::integer_sequence<int, kI...>) {
    return launch_fp8_tile(p, stream, plan, std::integer_sequence<int, kFound[1 + kI]...>{});
  }(std::make_integer_sequence<int, kFound[0]>{});
}

// Per head dim: fp8_fwd_hdim64.cu, fp8_fwd_hdim128.cu, fp8_fwd_hdim256.cu.
Status fp8_fwd_hdim64(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan);
Status fp8_fwd_hdim128(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan);
Status fp8_fwd_hdim256(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan);

}  // namespace flashattn::fa3
