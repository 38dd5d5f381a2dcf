// The backward's last kernel, shared by the FA2 and FA3 paths: the fp32 dQ accumulator, times
// dq_scale, into dq in its dtype. Both accumulators keep each 64-row slab of a (sequence, query
// head) contiguous (64 x dq_cols floats) and every float4 of it holds rows r and r + 8 at columns
// c and c + 1; a Layout names that DqQuad (common/dq_quad.h) of float4 f (fa2/dq_layout.h,
// fa3/bwd_dq_layout.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "arch/sm80/mma.cuh"
#include "common/problem.h"

namespace flashattn::gpu {

inline constexpr int kConvertDqThreads = 256, kConvertDqMaxCols = 256, kConvertDqRowPad = 8;

// Grid (rows_padded / 64, heads_q, batch): each block converts one 64-row slab. Its threads read
// the slab's float4s in order, the converted pairs meet in shared memory (rows padded by 16
// bytes: the pairs a warp writes fall in distinct banks), and the rows leave with 16-byte stores
// (`wide`: dq rows 16-byte aligned) or 4-byte ones. (Reading pairs at a 16-byte stride and
// storing them one by one ran at 1.7 TB/s: docs/PERF.md.)
template <typename Element, typename Layout>
__global__ void __launch_bounds__(kConvertDqThreads) bwd_convert_dq_kernel(const BwdProblem bp, const float* dq_accum,
                                                                           int64_t rows_padded, int dq_cols, Layout layout,
                                                                           float dq_scale, bool wide) {
  __shared__ __align__(16) Element slab[64][kConvertDqMaxCols + kConvertDqRowPad];
  const AttnProblem& p = bp.fwd;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int row_first = int(blockIdx.x) * 64;
  const int sq = int(p.lens.q(b) < rows_padded ? p.lens.q(b) : rows_padded);
  if (row_first >= sq) return;
  const float4* src = reinterpret_cast<const float4*>(dq_accum + ((b * p.heads_q + h) * rows_padded + row_first) * dq_cols);
#pragma unroll 4
  for (int f = threadIdx.x; f < 16 * dq_cols; f += kConvertDqThreads) {
    const float4 v = src[f];
    const auto [r, c] = layout.quad(f, dq_cols);
    *reinterpret_cast<uint32_t*>(&slab[r][c]) = sm80::pack2<Element>(v.x * dq_scale, v.y * dq_scale);
    *reinterpret_cast<uint32_t*>(&slab[r + 8][c]) = sm80::pack2<Element>(v.z * dq_scale, v.w * dq_scale);
  }
  __syncthreads();
  Element* dq = static_cast<Element*>(bp.dq.data);
  const int rows = sq - row_first < 64 ? sq - row_first : 64;
  const int per_row = int(p.head_dim) / (wide ? 8 : 2);
  for (int i = threadIdx.x; i < rows * per_row; i += kConvertDqThreads) {
    const int r = i / per_row, c = (wide ? 8 : 2) * (i - r * per_row);
    Element* dst = dq + bp.dq.offset(b, row_first + r, h) + c;
    if (wide) *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(&slab[r][c]);
    else *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(&slab[r][c]);
  }
}

// Enqueues the conversion of every 64-row slab (dq_cols <= kConvertDqMaxCols, rows_padded a
// multiple of 64).
template <typename Element, typename Layout>
cudaError_t launch_bwd_convert_dq(const BwdProblem& bp, const float* dq_accum, int64_t rows_padded, int dq_cols,
                                  Layout layout, float dq_scale, cudaStream_t stream) {
  const dim3 grid(unsigned(rows_padded / 64), unsigned(bp.fwd.heads_q), unsigned(bp.fwd.batch));
  bwd_convert_dq_kernel<Element, Layout><<<grid, kConvertDqThreads, 0, stream>>>(bp, dq_accum, rows_padded, dq_cols, layout,
                                                                                 dq_scale, rows_aligned_16(bp.dq));
  return cudaGetLastError();
}

}  // namespace flashattn::gpu
