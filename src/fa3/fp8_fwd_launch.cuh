// Launch of one FA3 fp8 forward configuration (Fp8FwdConfig): the tensor maps of the call, the
// schedule of its plan, then the shared forward kernel (fwd_kernel.cuh). Each fp8_fwd_hdim*.cu
// instantiates the tiles of one head dim (fp8_fwd_tiles.h).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <utility>

#include "fa3/fp8_fwd_config.h"
#include "fa3/fp8_fwd_plan.h"
#include "fa3/fp8_fwd_tiles.h"
#include "fa3/fwd_launch.cuh"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// The shared forward launch (fwd_launch.cuh) with the plan's choice of order for tiles of unequal
// length.
template <typename Config>
Status launch_fp8(const AttnProblem& p, cudaStream_t stream, const Fp8FwdPlan& plan) {
  // check_fp8_fwd_plan's rule for TMA stores of O holds for this configuration's V stages.
  static_assert(!fp8_o_fits_v_stages(Config::kBlockM, Config::kBlockN) || Config::kOBytes <= Config::kStages * Config::kVBytes);
  return launch_fwd_kernel<Config>(p, plan.dynamic_schedule, plan.section_mb, plan.tma_store_o, stream);
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
