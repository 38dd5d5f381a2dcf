// Split-KV combine on the device: one warp per (sequence, row, head) output row.
#include <cuda_runtime.h>

#include "common/kvcache_problem.h"
#include "arch/sm80/math.cuh"
#include "common/numeric.h"
#include "common/cuda_status.h"
#include "fa2/fa2_backend.h"

namespace flashattn::fa2 {
namespace {

__device__ __forceinline__ void store_as(void* base, int64_t i, DType dtype, float x) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[i] = x; break;
    case DType::F16: static_cast<uint16_t*>(base)[i] = numeric::float_to_fp16(x); break;
    default: static_cast<uint16_t*>(base)[i] = numeric::float_to_bf16(x); break;
  }
}

__global__ void combine_kernel(const CombineProblem c) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= c.batch * c.seqlen * c.heads) return;
  const int64_t h = warp % c.heads, i = (warp / c.heads) % c.seqlen, b = warp / (c.heads * c.seqlen);

  float max_lse = -INFINITY;
  // (a NaN LSE makes the row NaN, as the math does)
  for (int64_t s = lane; s < c.splits; s += 32) max_lse = sm80::max_nan(max_lse, c.lse_partial[c.lse_partial_strides.offset(s, b, i, h)]);
  for (int o = 16; o > 0; o /= 2) max_lse = sm80::max_nan(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, o));
  float sum = 0.f;
  if (max_lse != -INFINITY)
    for (int64_t s = lane; s < c.splits; s += 32) sum += expf(c.lse_partial[c.lse_partial_strides.offset(s, b, i, h)] - max_lse);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const bool empty = max_lse == -INFINITY;  // no split saw a key: out 0, lse -inf

  for (int64_t x = lane; x < c.head_dim; x += 32) {
    float acc = 0.f;
    if (!empty)
      for (int64_t s = 0; s < c.splits; ++s) {
        // Only a split that saw no key (LSE -inf) is skipped: one whose weight underflows still
        // carries a NaN output into the row (0 * NaN), as the math does.
        const float lse_s = c.lse_partial[c.lse_partial_strides.offset(s, b, i, h)];
        if (lse_s != -INFINITY) acc += expf(lse_s - max_lse) * c.out_partial[c.out_partial_strides.offset(s, b, i, h) + x];
      }
    store_as(c.out, c.out_strides.offset(0, b, i, h) + x, c.out_dtype, empty ? 0.f : acc / sum);
  }
  if (lane == 0 && c.lse != nullptr) c.lse[c.lse_strides.offset(0, b, i, h)] = empty ? -INFINITY : max_lse + logf(sum);
}

}  // namespace

Status combine(const CombineProblem& c, void* stream) {
  const int64_t rows = c.batch * c.seqlen * c.heads;
  if (rows == 0) return {};
  constexpr int kThreads = 256;
  const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return Status::error(ErrorCode::Unsupported, "out", "fa2 combine: too many rows for one launch");
  combine_kernel<<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(c);
  return cuda_status("fa2 combine: launch", cudaGetLastError());
}

}  // namespace flashattn::fa2
