// Split-KV combine on the device: one warp per (sequence, row, head) output row. The kernel is
// chosen by a CombinePlan (combine_plan.h).
#include <cuda_runtime.h>

#include <string>

#include "arch/sm80/math.cuh"
#include "common/cuda_status.h"
#include "common/kvcache_problem.h"
#include "common/numeric.h"
#include "fa2/combine_plan.h"
#include "fa2/fa2_backend.h"

namespace flashattn::fa2 {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ void store_as(void* base, int64_t i, DType dtype, float x) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[i] = x; break;
    case DType::F16: static_cast<uint16_t*>(base)[i] = numeric::float_to_fp16(x); break;
    default: static_cast<uint16_t*>(base)[i] = numeric::float_to_bf16(x); break;
  }
}

struct CombineRow {
  int64_t b = 0, i = 0, h = 0;
};

// The output row of this warp; false past the last one (the whole warp returns together).
__device__ __forceinline__ bool warp_row(const CombineProblem& c, CombineRow* row) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= c.batch * c.seqlen * c.heads) return false;
  row->h = warp % c.heads;
  row->i = (warp / c.heads) % c.seqlen;
  row->b = warp / (c.heads * c.seqlen);
  return true;
}

__device__ __forceinline__ float split_lse(const CombineProblem& c, const CombineRow& r, int64_t s) {
  return c.lse_partial[c.lse_partial_strides.offset(s, r.b, r.i, r.h)];
}

// The row's largest split LSE and the sum of exp(lse_s - max) over the splits, on every lane. A
// NaN LSE makes both NaN, so the row comes out NaN, as the math does.
__device__ __forceinline__ void row_lse_stats(const CombineProblem& c, const CombineRow& r, int lane, float* max_out,
                                              float* sum_out) {
  float max_lse = -INFINITY;
  for (int64_t s = lane; s < c.splits; s += 32) max_lse = sm80::max_nan(max_lse, split_lse(c, r, s));
  for (int o = 16; o > 0; o /= 2) max_lse = sm80::max_nan(max_lse, __shfl_xor_sync(kFullWarp, max_lse, o));
  float sum = 0.f;
  if (max_lse != -INFINITY)
    for (int64_t s = lane; s < c.splits; s += 32) sum += expf(split_lse(c, r, s) - max_lse);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(kFullWarp, sum, o);
  *max_out = max_lse;
  *sum_out = sum;
}

__device__ __forceinline__ void store_row_lse(const CombineProblem& c, const CombineRow& r, int lane, bool empty,
                                              float max_lse, float sum) {
  if (lane == 0 && c.lse != nullptr) c.lse[c.lse_strides.offset(0, r.b, r.i, r.h)] = empty ? -INFINITY : max_lse + logf(sum);
}

template <int kVec>
__device__ __forceinline__ void load_columns(const float* src, bool active, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 x = active ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    v[0] = active ? *src : 0.f;
  }
}

// Each lane owns kVec consecutive columns per pass of 32 * kVec columns. Per chunk of 32 splits,
// lane j computes split j's weight once; the warp then walks the chunk, broadcasting each weight,
// so the loads of the partial outputs do not wait on LSE loads and unroll into a batch. Every
// lane runs every pass (the shuffles need the whole warp); lanes past the head dim load nothing.
template <int kVec>
__global__ void __launch_bounds__(256) combine_split_weights_kernel(const CombineProblem c) {
  CombineRow r;
  if (!warp_row(c, &r)) return;
  const int lane = threadIdx.x % 32;
  float max_lse, sum;
  row_lse_stats(c, r, lane, &max_lse, &sum);
  const bool empty = max_lse == -INFINITY;  // warp-uniform
  const float* partial_row = c.out_partial + c.out_partial_strides.offset(0, r.b, r.i, r.h);
  const int64_t split_stride = c.out_partial_strides.split;
  constexpr int kBatch = 8;  // divides 32

  for (int64_t pass = 0; pass < c.head_dim; pass += 32 * kVec) {
    const int64_t x = pass + int64_t(lane) * kVec;
    const bool active = x < c.head_dim;
    float acc[kVec] = {};
    for (int64_t chunk = 0; !empty && chunk < c.splits; chunk += 32) {
      const int64_t mine = chunk + lane;
      const float lse_mine = mine < c.splits ? split_lse(c, r, mine) : -INFINITY;
      // A split that saw no key (LSE -inf) is skipped; one whose weight underflows still carries
      // a NaN output into the row (0 * NaN), as the math does.
      const float weight_mine = lse_mine != -INFINITY ? expf(lse_mine - max_lse) : 0.f;
      const int live_mine = lse_mine != -INFINITY;
      const int count = c.splits - chunk < 32 ? int(c.splits - chunk) : 32;
      // Batches of kBatch loads issued before their sums; lanes past `count` hold weight 0 and
      // live 0 (their split does not exist), so the batch needs no bound on the shuffles.
      for (int j0 = 0; j0 < count; j0 += kBatch) {
        float v[kBatch][kVec];
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          load_columns<kVec>(partial_row + (chunk + j0 + u) * split_stride + x, active && j0 + u < count, v[u]);
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const float weight = __shfl_sync(kFullWarp, weight_mine, j0 + u);
          const int live = __shfl_sync(kFullWarp, live_mine, j0 + u);
#pragma unroll
          for (int t = 0; t < kVec; ++t) acc[t] = live ? fmaf(weight, v[u][t], acc[t]) : acc[t];
        }
      }
    }
    if (active) {
      const int64_t out_base = c.out_strides.offset(0, r.b, r.i, r.h) + x;
#pragma unroll
      for (int t = 0; t < kVec; ++t)
        if (x + t < c.head_dim) store_as(c.out, out_base + t, c.out_dtype, empty ? 0.f : acc[t] / sum);
    }
  }
  store_row_lse(c, r, lane, empty, max_lse, sum);
}

}  // namespace

Status combine(const CombineProblem& c, void* stream, const CombinePlan* forced_plan) {
  const CombinePlan plan = forced_plan != nullptr ? *forced_plan : combine_plan(c);
  if (const std::string misfit = combine_plan_misfit(plan, c); !misfit.empty())
    return Status::error(ErrorCode::InvalidArgument, "plan", "fa2 combine: the forced plan does not fit the call: " + misfit);
  const int64_t rows = c.batch * c.seqlen * c.heads;
  if (rows == 0) return {};
  constexpr int kThreads = 256;
  const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return Status::error(ErrorCode::Unsupported, "out", "fa2 combine: too many rows for one launch");
  const auto s = static_cast<cudaStream_t>(stream);
  if (plan.vector_width == 4)
    combine_split_weights_kernel<4><<<unsigned(blocks), kThreads, 0, s>>>(c);
  else
    combine_split_weights_kernel<1><<<unsigned(blocks), kThreads, 0, s>>>(c);
  return cuda_status("fa2 combine: launch", cudaGetLastError());
}

}  // namespace flashattn::fa2
