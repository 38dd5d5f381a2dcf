// Launch of one FA3 backward main-kernel configuration (the tensor maps, then the kernel). Each
// bwd_hdim*.cu instantiates the configurations of one head dim; bwd_launch.cu runs the whole
// backward around them (workspaces, preprocess, dQ conversion).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#include "common/cuda_status.h"
#include "fa3/bwd_config.h"
#include "fa3/bwd_kernel.cuh"
#include "fa3/bwd_plan.h"
#include "fa3/bwd_variants.h"
#include "fa3/fa3_backend.h"
#include "fa3/launch_common.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// Tensor maps of q, k, v, dout for block_m-row Q/dO boxes and block_n-row K/V boxes, and of dk
// and dv where the plan stores them by TMA (bwd_launch.cu).
Status make_bwd_maps(const BwdProblem& bp, const BwdPlan& plan, int block_m, int block_n, BwdMaps* maps);

template <typename Config>
Status launch_bwd_config(BwdArgs args, const BwdPlan& plan, cudaStream_t stream) {
  const AttnProblem& p = args.problem.fwd;
  const int64_t key_blocks = (p.lens.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  if (key_blocks == 0 || p.batch == 0 || p.heads_k == 0) return {};
  args.section_shift = bwd_section_shift(args.problem, plan, args.rows_padded, key_blocks, sm_count());
  args.heads_k_divmod = FastDivmod(int(p.heads_k));
  BwdMaps maps;
  if (Status st = make_bwd_maps(args.problem, plan, Config::kBlockM, Config::kBlockN, &maps); !st.ok()) return st;
  auto kernel = bwd_kernel<Config>;
  FLASHATTN_CUDA_CHECK("fa3 bwd", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes));
  kernel<<<dim3(unsigned(key_blocks), unsigned(p.heads_k), unsigned(p.batch)), Config::kThreads, Config::kSmemBytes, stream>>>(maps,
                                                                                                                          args);
  return cuda_status("fa3 bwd: main kernel launch", cudaGetLastError());
}

// The configuration of the built kernel (bwd_variants.h) that the plan names, launched; a plan
// naming none is refused. One instantiation per entry of kBuilt.
template <typename Element, int kHeadDim, bool kGeneralScore, const auto& kBuilt, size_t... kI>
Status launch_bwd_built(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream, std::index_sequence<kI...>) {
  Status st = Status::error(ErrorCode::InvalidArgument, "plan", "fa3 bwd: the plan names a kernel variant that is not built");
  const auto launch_if_named = [&](auto built) {
    constexpr BwdKernel kKernel = kBuilt[decltype(built)::value];
    if constexpr (!kKernel.takes(kGeneralScore)) {
      return false;
    } else {
      using Config = BwdConfig<Element, kHeadDim, kKernel.block_m, kGeneralScore, kKernel.variant>;
      static_assert(Config::kDqCols == BwdConfig<Element, kHeadDim, 64, kGeneralScore>::kDqCols,
                    "one dQ workspace layout per head dim (the conversion reads it)");
      if (plan.block_m != kKernel.block_m || !(plan.variant == kKernel.variant)) return false;
      st = launch_bwd_config<Config>(args, plan, stream);
      return true;
    }
  };
  (launch_if_named(std::integral_constant<size_t, kI>{}) || ...);
  return st;
}

template <int kHeadDim, const auto& kBuilt>
Status launch_bwd_variant(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  constexpr auto kAll = std::make_index_sequence<std::size(kBuilt)>{};
  const bool f16 = args.problem.fwd.dtype == DType::F16;
  if (plan.general_score)
    return f16 ? launch_bwd_built<__half, kHeadDim, true, kBuilt>(args, plan, stream, kAll)
               : launch_bwd_built<__nv_bfloat16, kHeadDim, true, kBuilt>(args, plan, stream, kAll);
  return f16 ? launch_bwd_built<__half, kHeadDim, false, kBuilt>(args, plan, stream, kAll)
             : launch_bwd_built<__nv_bfloat16, kHeadDim, false, kBuilt>(args, plan, stream, kAll);
}

// Per head dim (the kernel's): bwd_hdim64.cu, bwd_hdim128.cu, bwd_hdim256.cu, each launching the
// kernels bwd_variants.h lists for it.
Status bwd_hdim64(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream);
Status bwd_hdim128(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream);
Status bwd_hdim256(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream);

}  // namespace flashattn::fa3
