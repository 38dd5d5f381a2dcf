// The backward's first kernel, shared by the FA2 and FA3 paths: per (sequence, query head, row)
// D = rowsum(dO * O) and LSE * log2(e) into a workspace whose rows are padded (rows_padded per
// (sequence, head)). Padding rows and rows that saw no key get LSE = +inf (so P = 0 there) and D = 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/problem.h"

namespace flashattn::gpu {

struct BwdRowStats {
  float* lse_log2 = nullptr;  // [batch][heads_q][rows_padded]
  float* delta = nullptr;     // [batch][heads_q][rows_padded]
  int64_t rows_padded = 0;
};

// Two consecutive elements as floats.
template <typename Element>
__device__ __forceinline__ float2 load2_as_float(const Element* p);
template <>
__device__ __forceinline__ float2 load2_as_float<__half>(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <>
__device__ __forceinline__ float2 load2_as_float<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// One warp per row. Grid (rows_padded / kRowStatsRowsPerCta, heads_q, batch).
inline constexpr int kRowStatsRowsPerCta = 8;

template <typename Element>
__global__ void __launch_bounds__(32 * kRowStatsRowsPerCta) bwd_row_stats_kernel(const BwdProblem bp, const BwdRowStats stats) {
  const AttnProblem& p = bp.fwd;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int row = int(blockIdx.x) * kRowStatsRowsPerCta + int(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  if (row >= stats.rows_padded) return;
  const int64_t ws = (b * p.heads_q + h) * stats.rows_padded + row;
  if (row >= p.lens.q(b)) {  // padding: P = 0 there
    if (lane == 0) {
      stats.lse_log2[ws] = INFINITY;
      stats.delta[ws] = 0.f;
    }
    return;
  }
  const Element* o_row = static_cast<const Element*>(p.out.data) + p.out.offset(b, row, h);
  const Element* do_row = static_cast<const Element*>(bp.dout.data) + bp.dout.offset(b, row, h);
  float sum = 0.f;
  for (int c = 2 * lane; c < p.head_dim_v; c += 64) {
    const float2 o = load2_as_float(o_row + c), d = load2_as_float(do_row + c);
    sum += o.x * d.x + o.y * d.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    const float lse = p.lse.data[p.lse.offset(b, row, h)];
    // A row that saw no key has LSE -inf and no gradient: +inf makes its P exactly 0.
    stats.lse_log2[ws] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
    stats.delta[ws] = sum;
  }
}

// Enqueues the kernel for every (row block, query head, sequence) of the problem.
template <typename Element>
cudaError_t launch_bwd_row_stats(const BwdProblem& bp, const BwdRowStats& stats, cudaStream_t stream) {
  const dim3 grid(unsigned(stats.rows_padded / kRowStatsRowsPerCta), unsigned(bp.fwd.heads_q), unsigned(bp.fwd.batch));
  bwd_row_stats_kernel<Element><<<grid, 32 * kRowStatsRowsPerCta, 0, stream>>>(bp, stats);
  return cudaGetLastError();
}

}  // namespace flashattn::gpu
