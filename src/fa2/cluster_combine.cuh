// Split-KV inside one thread-block cluster (sm90, the key-split decode tiles): a row block's
// splits run as the CTAs of one cluster (cluster rank = split), and instead of writing float
// partials for a combine kernel each CTA leaves its rows' unnormalised O, running max and sum in
// its own shared memory. After a cluster barrier, rank r merges the units r, r + S, r + 2S, .. (a
// unit: four columns of one row) over the cluster's S CTAs through distributed shared memory, with
// the combine kernel's rule (fa2/combine.cu), and stores them; a second barrier keeps every CTA's
// shared memory until the cluster has read it. Nothing of the partials reaches global memory and
// no second kernel runs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm90/cluster.cuh"
#include "arch/sm80/ldmatrix.cuh"
#include "fa2/fwd_plan.h"

namespace flashattn::fa2 {

// One CTA's share in its shared memory: the 16 rows of a key-split tile.
template <int kHeadDim>
struct ClusterPartial {
  float o[16][kHeadDim];  // unnormalised: sum over the CTA's keys of exp2(logit - max) v
  float2 stats[16];       // (running max in log2 units, sum of exp2(logit - max))
};

// Warp 0 of each CTA, holding its CTA's merged rows (merge_key_split_warps): o, row_max and
// row_sum in the m16n8 accumulator layout (rows lane / 4 and + 8; row_sum per lane, not yet
// reduced over the quad). `space`: 16-byte aligned shared memory for a ClusterPartial that no
// other warp touches any more. store(row, col, float4 out, lse) writes out[row][col .. col + 3]
// (normalised) and, where col is 0, the row's LSE (natural log); rows at or past rows_here are
// not stored. Every CTA of the cluster calls it (their other warps may have exited).
template <typename Config, typename Store>
__device__ __forceinline__ void merge_cluster_splits(const float (&o)[1][Config::kNTilesO][4], const float (&row_max)[2],
                                                     const float (&row_sum)[2], unsigned char* space, int splits, int rows_here,
                                                     int lane, Store store) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // a cluster launch running pre-sm90 code: the shares could not meet (fwd_launch.cuh)
#endif
  constexpr int kHeadDim = Config::kHeadDim, kUnitsPerRow = kHeadDim / 4;
  constexpr float kLn2 = 0.6931471805599453f;
  using Partial = ClusterPartial<kHeadDim>;
  Partial* own = reinterpret_cast<Partial*>(space);
  const int group = lane / 4, quad = lane % 4;
#pragma unroll
  for (int t = 0; t < Config::kNTilesO; ++t)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      *reinterpret_cast<float2*>(&own->o[group + 8 * half][t * 8 + quad * 2]) = make_float2(o[0][t][2 * half], o[0][t][2 * half + 1]);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (quad == 0) own->stats[group + 8 * r] = make_float2(row_max[r], sum);
  }
  sm90::cluster_sync();  // every CTA's share written

  const int rank = int(sm90::cluster_rank());
  const uint32_t base = sm80::smem_address(own);
#pragma unroll 1
  for (int u = rank + splits * lane; u < rows_here * kUnitsPerRow; u += splits * 32) {
    const int row = u / kUnitsPerRow, col = (u % kUnitsPerRow) * 4;
    const uint32_t stats_at = base + uint32_t(offsetof(Partial, stats) + row * sizeof(float2));
    const uint32_t o_at = base + uint32_t((row * kHeadDim + col) * sizeof(float));
    // Every share's statistics and columns are loaded before any is used: one round trip through
    // the cluster instead of one per few shares. A NaN max makes the row NaN, as the math does; a
    // share that saw no key (max -inf) weighs 0.
    float2 stats[kMaxClusterSplits];
    float4 part[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      stats[s] = make_float2(-INFINITY, 0.f);
      if (s < splits) {
        stats[s] = sm90::ld_cluster_f32x2(sm90::cluster_map_shared(stats_at, s));
        part[s] = sm90::ld_cluster_f32x4(sm90::cluster_map_shared(o_at, s));
      }
    }
    float max = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) max = sm80::max_nan(max, stats[s].x);
    float sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (max != -INFINITY) {
#pragma unroll
      for (int s = 0; s < kMaxClusterSplits; ++s) {
        if (stats[s].x == -INFINITY) continue;
        const float4 v = part[s];
        const float w = sm80::fast_exp2(stats[s].x - max);
        sum = fmaf(stats[s].y, w, sum);
        acc = make_float4(fmaf(w, v.x, acc.x), fmaf(w, v.y, acc.y), fmaf(w, v.z, acc.z), fmaf(w, v.w, acc.w));
      }
    }
    const bool empty = max == -INFINITY || sum == 0.f;
    const float inv = empty ? 0.f : 1.f / sum;
    store(row, col, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv), empty ? -INFINITY : (max + log2f(sum)) * kLn2);
  }
  sm90::cluster_sync();  // the cluster's reads of this CTA's share are done: it may exit
}

}  // namespace flashattn::fa2
