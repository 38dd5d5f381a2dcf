// The backward's first kernel, shared by the FA2 and FA3 paths: per (sequence, query head, row)
// D = rowsum(dO * O) and LSE * log2(e) into a workspace whose rows are padded (rows_padded per
// (sequence, head)). Padding rows and rows that saw no key get LSE = +inf (so P = 0 there) and D = 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/problem.h"

namespace flashattn::gpu {

struct BwdRowStats {
  float* lse_log2 = nullptr;  // [batch][heads_q][rows_padded]
  float* delta = nullptr;     // [batch][heads_q][rows_padded]
  int64_t rows_padded = 0;
  // Optional: a workspace of zero_per_row floats per padded row, laid out in (sequence, head,
  // row) order whatever the order inside a row block (the FA3 dQ accumulator), that the kernel
  // zeroes: each block clears the floats of its rows, so the accumulator needs no memset pass.
  float* zero = nullptr;
  int64_t zero_per_row = 0;
};

// Rows per block: a multiple of 4 (the float4 zeroing) dividing every rows_padded (a multiple of 128).
inline constexpr int kRowStatsRowsPerCta = 64;
inline constexpr int kRowStatsThreads = 256;

// dot(a, b) of kVec consecutive elements (kVec = 8: one 16-byte load each; 2: one 4-byte load).
template <typename Element, int kVec>
__device__ __forceinline__ float dot_elements(const Element* a, const Element* b) {
  using Pair = std::conditional_t<std::is_same_v<Element, __half>, __half2, __nv_bfloat162>;
  auto to_float2 = [](Pair v) {
    if constexpr (std::is_same_v<Element, __half>) return __half22float2(v);
    else return __bfloat1622float2(v);
  };
  if constexpr (kVec == 8) {
    const uint4 x = *reinterpret_cast<const uint4*>(a), y = *reinterpret_cast<const uint4*>(b);
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 u = to_float2(*reinterpret_cast<const Pair*>(&xs[i])), v = to_float2(*reinterpret_cast<const Pair*>(&ys[i]));
      sum = fmaf(u.x, v.x, fmaf(u.y, v.y, sum));
    }
    return sum;
  } else {
    const float2 u = to_float2(*reinterpret_cast<const Pair*>(a)), v = to_float2(*reinterpret_cast<const Pair*>(b));
    return fmaf(u.x, v.x, u.y * v.y);
  }
}

// Grid (rows_padded / kRowStatsRowsPerCta, heads_q, batch). A row is read by `group` consecutive
// lanes (a power of two <= 32, about head_dim_v / kVec), kVec elements of O and dO per lane and
// load, so a block reads its 64 rows with wide loads and many in flight (one warp per row with
// 4-byte loads and 8 rows per block read at a quarter of the bandwidth: docs/PERF.md).
template <typename Element, int kVec>
__global__ void __launch_bounds__(kRowStatsThreads) bwd_row_stats_kernel(const BwdProblem bp, const BwdRowStats stats, int group) {
  const AttnProblem& p = bp.fwd;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int row_first = int(blockIdx.x) * kRowStatsRowsPerCta;
  const int64_t ws_first = (b * p.heads_q + h) * stats.rows_padded + row_first;
  if (stats.zero != nullptr) {
    float4* zero = reinterpret_cast<float4*>(stats.zero + ws_first * stats.zero_per_row);
    const int64_t count = kRowStatsRowsPerCta * stats.zero_per_row / 4;
    for (int64_t i = threadIdx.x; i < count; i += kRowStatsThreads) zero[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int sq = int(p.lens.q(b) < stats.rows_padded ? p.lens.q(b) : stats.rows_padded);
  const int lane = int(threadIdx.x) % group, rows_per_pass = kRowStatsThreads / group;
  const int dv = int(p.head_dim_v);
  const Element* out = static_cast<const Element*>(p.out.data);
  const Element* dout = static_cast<const Element*>(bp.dout.data);
  for (int r = int(threadIdx.x) / group; r < kRowStatsRowsPerCta; r += rows_per_pass) {
    const int row = row_first + r;
    float sum = 0.f;
    if (row < sq) {
      const Element* o_row = out + p.out.offset(b, row, h);
      const Element* do_row = dout + bp.dout.offset(b, row, h);
      for (int c = lane * kVec; c < dv; c += group * kVec) sum += dot_elements<Element, kVec>(o_row + c, do_row + c);
    }
    for (int off = group / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
      const int64_t ws = ws_first + r;
      if (row >= sq) {  // padding: P = 0 there
        stats.lse_log2[ws] = INFINITY;
        stats.delta[ws] = 0.f;
      } else {
        const float lse = p.lse.data[p.lse.offset(b, row, h)];
        // A row that saw no key has LSE -inf and no gradient: +inf makes its P exactly 0.
        stats.lse_log2[ws] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
        stats.delta[ws] = sum;
      }
    }
  }
}

// Enqueues the kernel for every (row block, query head, sequence) of the problem.
template <typename Element>
cudaError_t launch_bwd_row_stats(const BwdProblem& bp, const BwdRowStats& stats, cudaStream_t stream) {
  const dim3 grid(unsigned(stats.rows_padded / kRowStatsRowsPerCta), unsigned(bp.fwd.heads_q), unsigned(bp.fwd.batch));
  const int64_t dv = bp.fwd.head_dim_v;
  const bool wide = dv % 8 == 0 && rows_aligned_16(bp.fwd.out) && rows_aligned_16(bp.dout);
  const int64_t loads = wide ? dv / 8 : dv / 2;  // per row
  int group = 1;
  while (group < 32 && group < loads) group *= 2;
  if (wide) bwd_row_stats_kernel<Element, 8><<<grid, kRowStatsThreads, 0, stream>>>(bp, stats, group);
  else bwd_row_stats_kernel<Element, 2><<<grid, kRowStatsThreads, 0, stream>>>(bp, stats, group);
  return cudaGetLastError();
}

}  // namespace flashattn::gpu
