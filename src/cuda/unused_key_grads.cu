#include "cuda/unused_key_grads.h"

#include <cuda_runtime.h>

#include "common/cuda_status.h"

namespace flashattn {
namespace {

__device__ __forceinline__ void store_zero(void* base, int64_t i, DType dtype) {
  if (dtype == DType::F32) static_cast<float*>(base)[i] = 0.f;
  else static_cast<uint16_t*>(base)[i] = 0;  // +0 in fp16 and bf16
}

// One warp per row of k's tensor (dense: batch x seqlen_k rows; varlen: k's rows, each found in
// cu_seqlens_k by binary search): a row at or past its sequence's seqused_k gets zero dK and dV.
__global__ void zero_unused_key_grads_kernel(const BwdProblem bp, int64_t rows) {
  const AttnProblem& p = bp.fwd;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int64_t b = 0, key = 0;
  if (const int32_t* cu = p.lens.cu_seqlens_k) {
    int64_t lo = 0, hi = p.batch;  // the last b with cu[b] <= row
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (int64_t(cu[mid]) <= row) lo = mid;
      else hi = mid;
    }
    b = lo;
    key = row - p.lens.k_start(b);  // (clamped like the rows the backward wrote: SeqLens)
    if (key < 0 || key >= p.lens.k_stored(b)) return;  // rows outside every sequence
  } else {
    b = row / p.lens.seqlen_k;
    key = row % p.lens.seqlen_k;
  }
  if (key < p.lens.k(b)) return;  // (seqused_k, clamped to the stored keys)
  for (int64_t h = 0; h < p.heads_k; ++h) {
    for (int64_t c = lane; c < p.head_dim; c += 32) store_zero(bp.dk.data, bp.dk.offset(b, key, h) + c, p.out_dtype);
    for (int64_t c = lane; c < p.head_dim_v; c += 32) store_zero(bp.dv.data, bp.dv.offset(b, key, h) + c, p.out_dtype);
  }
}

}  // namespace

Status zero_unused_key_grads(const BwdProblem& problem, void* stream) {
  const AttnProblem& p = problem.fwd;
  if (p.lens.seqused_k == nullptr || p.batch == 0 || p.heads_k == 0) return {};
  const int64_t rows = p.lens.cu_seqlens_k != nullptr ? p.lens.total_k : p.batch * p.lens.seqlen_k;
  if (rows == 0) return {};
  constexpr int kThreads = 256;
  const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return Status::error(ErrorCode::Unsupported, "k", "zeroing unused key gradients: too many rows");
  zero_unused_key_grads_kernel<<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(problem, rows);
  return cuda_status("zeroing unused key gradients: launch", cudaGetLastError());
}

}  // namespace flashattn
