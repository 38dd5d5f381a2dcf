// Launch of one FA3 backward main-kernel configuration (the tensor maps, then the kernel). Each
// bwd_hdim*.cu instantiates the configurations of one head dim; bwd_launch.cu runs the whole
// backward around them (workspaces, preprocess, dQ conversion).
#pragma once

#include <cuda_runtime.h>

#include "common/cuda_status.h"
#include "fa3/bwd_config.h"
#include "fa3/bwd_kernel.cuh"
#include "fa3/bwd_plan.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// Tensor maps of q, k, v, dout for block_m-row Q/dO boxes and block_n-row K/V boxes (bwd_launch.cu).
Status make_bwd_maps(const BwdProblem& bp, int block_m, int block_n, BwdMaps* maps);

template <typename Config>
Status launch_bwd_config(const BwdArgs& args, cudaStream_t stream) {
  const AttnProblem& p = args.problem.fwd;
  const int64_t key_blocks = (p.lens.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  if (key_blocks == 0 || p.batch == 0 || p.heads_k == 0) return {};
  BwdMaps maps;
  if (Status st = make_bwd_maps(args.problem, Config::kBlockM, Config::kBlockN, &maps); !st.ok()) return st;
  auto kernel = bwd_kernel<Config>;
  FLASHATTN_CUDA_CHECK("fa3 bwd", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes));
  kernel<<<dim3(unsigned(key_blocks), unsigned(p.heads_k), unsigned(p.batch)), Config::kThreads, Config::kSmemBytes, stream>>>(maps,
                                                                                                                          args);
  return cuda_status("fa3 bwd: main kernel launch", cudaGetLastError());
}

// Per head dim (the kernel's): bwd_hdim64.cu, bwd_hdim128.cu, bwd_hdim256.cu.
Status bwd_hdim64(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream);
Status bwd_hdim128(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream);
Status bwd_hdim256(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream);

}  // namespace flashattn::fa3
