// Split-KV combine on the device: each (sequence, row, head) output row is merged by one warp, or
// by up to eight warps of one block that share its splits (few rows, many splits: a decode step of
// a few sequences). The kernel is chosen by a CombinePlan (combine_plan.h).
#include <cuda_runtime.h>

#include <string>

#include "arch/sm80/math.cuh"
#include "arch/sm90/grid_dependency.cuh"
#include "common/cuda_status.h"
#include "common/kvcache_problem.h"
#include "common/numeric.h"
#include "fa2/combine_plan.h"
#include "fa2/device_limits.h"
#include "fa2/fa2_backend.h"

namespace flashattn::fa2 {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kThreads = 256, kBlockWarps = kThreads / 32;

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

__device__ __forceinline__ CombineRow row_at(const CombineProblem& c, int64_t index) {
  return {index / (c.heads * c.seqlen), (index / c.heads) % c.seqlen, index % c.heads};
}

__device__ __forceinline__ float split_lse(const CombineProblem& c, const CombineRow& r, int64_t s) {
  return c.lse_partial[c.lse_partial_strides.offset(s, r.b, r.i, r.h)];
}

struct MaxNan {
  __device__ float operator()(float a, float b) const { return sm80::max_nan(a, b); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// x reduced over the kWarpsPerRow warps of a row (warps part 0.. of block slot `slot`), on every
// lane of them, in a fixed order. Every thread of the block calls it (it holds block barriers).
template <int kWarpsPerRow, typename Op>
__device__ __forceinline__ float row_reduce(float x, Op op, float* slots, int warp, int slot) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = op(x, __shfl_xor_sync(kFullWarp, x, o));
  if constexpr (kWarpsPerRow == 1) {
    return x;
  } else {
    __syncthreads();  // the slots' last readers are done
    if (threadIdx.x % 32 == 0) slots[warp] = x;
    __syncthreads();
    float y = slots[slot * kWarpsPerRow];
#pragma unroll
    for (int w = 1; w < kWarpsPerRow; ++w) y = op(y, slots[slot * kWarpsPerRow + w]);
    return y;
  }
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

// Row `index` of the call is merged by kWarpsPerRow warps: their threads read the split LSEs
// together (the row's max and sum of exp(lse - max) reduced across them), then warp `part` takes
// splits part, part + kWarpsPerRow, ..: per chunk of 32 of its splits, lane j computes split j's
// weight once and the warp walks the chunk, broadcasting each weight, so the loads of the partial
// outputs do not wait on LSE loads and issue in batches. Each lane owns kVec consecutive columns per
// pass of 32 * kVec columns; the warps' sums meet in shared memory, and part 0 writes the row.
template <int kVec, int kWarpsPerRow>
__global__ void __launch_bounds__(kThreads) combine_rows_kernel(const CombineProblem c) {
  constexpr int kRowThreads = 32 * kWarpsPerRow, kRowsPerBlock = kBlockWarps / kWarpsPerRow;
  __shared__ float slots[kBlockWarps];
  __shared__ float4 sums[kWarpsPerRow > 1 ? kBlockWarps : 1][32 * kVec / 4 > 0 ? 32 * kVec / 4 : 1];
  // Launched as the forward's dependent (sm90): nothing of the partials is read before its writes.
  sm90::wait_on_prerequisite_grids();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = warp / kWarpsPerRow, part = warp % kWarpsPerRow;
  const int64_t index = int64_t(blockIdx.x) * kRowsPerBlock + slot;
  // Row groups past the last row run along (empty) to meet the block's barriers.
  const bool valid = index < c.batch * c.seqlen * c.heads;
  const CombineRow r = row_at(c, valid ? index : 0);

  // A NaN LSE makes the max and the sum NaN, so the row comes out NaN, as the math does.
  float max_lse = -INFINITY;
  if (valid)
#pragma unroll 4
    for (int64_t s = part * 32 + lane; s < c.splits; s += kRowThreads) max_lse = sm80::max_nan(max_lse, split_lse(c, r, s));
  max_lse = row_reduce<kWarpsPerRow>(max_lse, MaxNan{}, slots, warp, slot);
  const bool empty = max_lse == -INFINITY;  // uniform over the row's warps
  float sum = 0.f;
  if (valid && !empty)
#pragma unroll 4
    for (int64_t s = part * 32 + lane; s < c.splits; s += kRowThreads) sum += expf(split_lse(c, r, s) - max_lse);
  sum = row_reduce<kWarpsPerRow>(sum, Add{}, slots, warp, slot);

  const float* partial_row = c.out_partial + c.out_partial_strides.offset(0, r.b, r.i, r.h);
  const int64_t split_stride = c.out_partial_strides.split * kWarpsPerRow;  // between this warp's splits
  const int64_t mine = part < c.splits ? (c.splits - part + kWarpsPerRow - 1) / kWarpsPerRow : 0;
  constexpr int kBatch = 8;  // divides 32
  for (int64_t pass = 0; pass < c.head_dim; pass += 32 * kVec) {
    const int64_t x = pass + int64_t(lane) * kVec;
    const bool active = valid && x < c.head_dim;
    float acc[kVec] = {};
    const float* column = partial_row + part * c.out_partial_strides.split + x;
    for (int64_t chunk = 0; valid && !empty && chunk < mine; chunk += 32) {
      const int64_t i = chunk + lane;
      const float lse_i = i < mine ? split_lse(c, r, part + i * kWarpsPerRow) : -INFINITY;
      // A split that saw no key (LSE -inf) is skipped; one whose weight underflows still carries
      // a NaN output into the row (0 * NaN), as the math does.
      const float weight_i = lse_i != -INFINITY ? expf(lse_i - max_lse) : 0.f;
      const int live_i = lse_i != -INFINITY;
      const int count = mine - chunk < 32 ? int(mine - chunk) : 32;
      // Batches of kBatch loads issued before their sums; lanes past `count` hold weight 0 and
      // live 0 (their split does not exist), so the batch needs no bound on the shuffles.
      for (int j0 = 0; j0 < count; j0 += kBatch) {
        float v[kBatch][kVec];
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          load_columns<kVec>(column + (chunk + j0 + u) * split_stride, active && j0 + u < count, v[u]);
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const float weight = __shfl_sync(kFullWarp, weight_i, j0 + u);
          const int live = __shfl_sync(kFullWarp, live_i, j0 + u);
#pragma unroll
          for (int t = 0; t < kVec; ++t) acc[t] = live ? fmaf(weight, v[u][t], acc[t]) : acc[t];
        }
      }
    }
    if constexpr (kWarpsPerRow > 1) {
      __syncthreads();  // the sums' last readers are done
      float* mine_out = reinterpret_cast<float*>(sums[warp]) + lane * kVec;
#pragma unroll
      for (int t = 0; t < kVec; ++t) mine_out[t] = acc[t];
      __syncthreads();
      if (part == 0)
#pragma unroll
        for (int w = 1; w < kWarpsPerRow; ++w) {
          const float* other = reinterpret_cast<const float*>(sums[warp + w]) + lane * kVec;
#pragma unroll
          for (int t = 0; t < kVec; ++t) acc[t] += other[t];
        }
    }
    if (part == 0 && active) {
      const int64_t out_base = c.out_strides.offset(0, r.b, r.i, r.h) + x;
#pragma unroll
      for (int t = 0; t < kVec; ++t)
        if (x + t < c.head_dim) store_as(c.out, out_base + t, c.out_dtype, empty ? 0.f : acc[t] / sum);
    }
  }
  if (valid && part == 0 && lane == 0 && c.lse != nullptr)
    c.lse[c.lse_strides.offset(0, r.b, r.i, r.h)] = empty ? -INFINITY : max_lse + logf(sum);
}

// On sm90 the combine launches as a programmatic dependent of the kernel before it in the stream
// (the forward that wrote the partials): its blocks start as that kernel's last ones finish
// instead of after the whole grid has drained and the launch gap (grid_dependency.cuh).
template <int kVec>
Status launch_rows(const CombineProblem& c, int warps_per_row, int64_t rows, bool dependent_launch, cudaStream_t s) {
  const int64_t rows_per_block = kBlockWarps / warps_per_row;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7fffffff) return Status::error(ErrorCode::Unsupported, "out", "fa2 combine: too many rows for one launch");
  void (*kernel)(CombineProblem) = combine_rows_kernel<kVec, 1>;
  switch (warps_per_row) {
    case 8: kernel = combine_rows_kernel<kVec, 8>; break;
    case 4: kernel = combine_rows_kernel<kVec, 4>; break;
    case 2: kernel = combine_rows_kernel<kVec, 2>; break;
    default: break;
  }
  return cuda_status("fa2 combine: launch",
                     sm90::launch_maybe_dependent(kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, s, dependent_launch, c));
}

}  // namespace

Status combine(const CombineProblem& c, void* stream, const CombinePlan* forced_plan) {
  DeviceLimits limits;
  if (Status st = device_limits(&limits, "fa2 combine: reading the device"); !st.ok()) return st;
  const CombinePlan plan = forced_plan != nullptr ? *forced_plan : combine_plan(c, limits.multiprocessors);
  if (const std::string misfit = combine_plan_misfit(plan, c); !misfit.empty())
    return Status::error(ErrorCode::InvalidArgument, "plan", "fa2 combine: the forced plan does not fit the call: " + misfit);
  const int64_t rows = c.batch * c.seqlen * c.heads;
  if (rows == 0) return {};
  const auto s = static_cast<cudaStream_t>(stream);
  const bool dependent_launch = limits.arch >= 90;
  return plan.vector_width == 4 ? launch_rows<4>(c, plan.warps_per_row, rows, dependent_launch, s)
                                : launch_rows<1>(c, plan.warps_per_row, rows, dependent_launch, s);
}

}  // namespace flashattn::fa2
