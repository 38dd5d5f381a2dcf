// Picks the FA2 forward instantiation for a call (dtype x padded head dim) and launches it.
#include <cuda_runtime.h>

#include <string>

#include "fa2/fa2_backend.h"
#include "fa2/fwd_kernel.cuh"

namespace flashattn::fa2 {
namespace {

Status cuda_error(const char* what, cudaError_t err) {
  return Status::error(ErrorCode::CudaError, "", std::string("fa2 fwd: ") + what + ": " + cudaGetErrorString(err));
}

template <typename Config>
Status launch(const AttnProblem& p, cudaStream_t stream) {
  auto kernel = fwd_kernel<Config>;
  int device = 0, smem_optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) return cuda_error("reading the device", err);
  if (Config::kSmemBytes > smem_optin)
    return Status::error(ErrorCode::Unsupported, "q",
                         "fa2 fwd: head dim " + std::to_string(p.head_dim) + " needs " +
                             std::to_string(Config::kSmemBytes) + " bytes of shared memory per block, the GPU has " +
                             std::to_string(smem_optin));
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes);
  if (err != cudaSuccess) return cuda_error("raising the shared-memory limit", err);
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (row_blocks > 0x7fffffff || p.heads_q > 65535 || p.batch > 65535)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: more than 65535 heads or sequences per call");
  if (row_blocks == 0 || p.batch == 0) return {};
  const dim3 grid(unsigned(row_blocks), unsigned(p.heads_q), unsigned(p.batch));
  kernel<<<grid, Config::kThreads, Config::kSmemBytes, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error("launch", err);
  return {};
}

template <typename Element, bool kDropout>
Status dispatch_head_dim(const AttnProblem& p, cudaStream_t stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  // (head dim, kBlockM, kBlockN, warps): each warp holds kBlockM / warps rows.
  if (dim <= 64) return launch<FwdConfig<Element, 64, 128, kDropout ? 32 : 64, 4, kDropout>>(p, stream);
  if (dim <= 128) return launch<FwdConfig<Element, 128, kDropout ? 64 : 128, 32, 4, kDropout>>(p, stream);
  return launch<FwdConfig<Element, 256, 64, 32, 4, kDropout>>(p, stream);
}

template <typename Element>
Status dispatch_dropout(const AttnProblem& p, cudaStream_t stream) {
  return p.dropout_p > 0.f ? dispatch_head_dim<Element, true>(p, stream) : dispatch_head_dim<Element, false>(p, stream);
}

}  // namespace

Status fwd(const AttnProblem& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::F16: return dispatch_dropout<__half>(p, s);
    case DType::BF16: return dispatch_dropout<__nv_bfloat16>(p, s);
    default:
      return Status::error(ErrorCode::Unsupported, "q",
                           std::string("argument 'q': the fa2 kernels take float16 or bfloat16, got ") +
                               dtype_name(p.dtype));
  }
}

}  // namespace flashattn::fa2
