// FlashAttention-3 forward, first version (sm90a): TMA loads on an mbarrier pipeline, wgmma, and
// warp specialisation. Not yet validated on a GPU; the next steps (ping-pong between the two
// consumer warpgroups, overlap of softmax with the GEMMs inside a warpgroup, TMA store of O,
// persistent scheduling) build on this structure.
//
// CTA = 3 warpgroups: warpgroup 0 is the producer (one elected thread issues the TMA loads of Q
// once and K, V per tile into a kStages ring); warpgroups 1 and 2 are consumers, 64 query rows each
// (kBlockM = 128). Shared memory holds every tile as 64-element (128-byte) column blocks in the
// 128-byte swizzle the TMA writes: Q [d/64][128 rows][64], K and V [stage][d/64][kBlockN][64].
// A consumer computes S = Q K^T (wgmma, both operands in shared memory, K-major), the masked online
// softmax in registers, then O += P V with P as the register A operand and V MN-major.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "common/mask.h"
#include "common/problem.h"
#include "common/score.h"

namespace flashattn::fa3 {

template <typename Element_, int kHeadDim_, int kBlockN_, int kStages_>
struct FwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;  // 64 or 128 (q, k and v)
  static constexpr int kBlockM = 128;         // two consumer warpgroups of 64 rows
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 384;
  static constexpr int kColumnBlocks = kHeadDim / 64;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one of K or V, one stage
  // Q, then K and V rings, then the barriers; every tile 1024-byte aligned for the swizzle.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + 1024 /*barriers*/ + 1024 /*alignment*/;
  static_assert(kHeadDim % 64 == 0 && kBlockN % 16 == 0, "tile shape");
};

// The tensor maps of one call: 4-D (head_dim, heads, seqlen, batch), innermost first; the box is
// 64 head-dim elements x 1 head x rows x 1 sequence.
struct FwdMaps {
  CUtensorMap q, k, v;
};

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, 1) fwd_kernel(const __grid_constant__ FwdMaps maps, const AttnProblem p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Config::Element;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kStages = Config::kStages;
  constexpr int kColumnBlocks = Config::kColumnBlocks, kHeadDim = Config::kHeadDim;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Element* smem_q = reinterpret_cast<Element*>(smem);
  Element* smem_k = reinterpret_cast<Element*>(smem + Config::kQBytes);
  Element* smem_v = reinterpret_cast<Element*>(smem + Config::kQBytes + kStages * Config::kKVBytes);
  auto* pipeline = reinterpret_cast<sm90::Pipeline<kStages>*>(smem + Config::kQBytes + 2 * kStages * Config::kKVBytes);
  uint64_t* q_full = reinterpret_cast<uint64_t*>(pipeline + 1);

  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int row0 = int(blockIdx.x) * kBlockM;
  const int sq = int(p.lens.q(b)), sk = int(p.lens.k(b));
  if (row0 >= sq) return;
  const int hk = int(p.kv_head(h));
  const int rows_here = min(kBlockM, sq - row0);
  const KeyRange keys = visible_keys(p.mask, row0, row0 + rows_here, sq, sk);
  const int tile_begin = int(keys.begin / kBlockN);
  const int tile_end = keys.empty() ? tile_begin : int((keys.end + kBlockN - 1) / kBlockN);
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    pipeline->init(2 * 128);  // every consumer thread releases a stage
    sm90::mbarrier_init(q_full, 1);
    sm90::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {  // ---------------------------------------------------------- producer
    sm90::warpgroup_registers_decrease<24>();
    if (threadIdx.x == 0) {
      // CHECK ON GPU: the expect-tx counts assume a box that is partly out of bounds (last Q block
      // when seqlen_q % 128 != 0, last K/V tile) still completes its full box bytes (zero-filled),
      // as CUTLASS/FA3 rely on; if not, the consumers hang on the full barrier of that tile.
      sm90::mbarrier_arrive_expect_tx(q_full, Config::kQBytes);
      for (int c = 0; c < kColumnBlocks; ++c)
        sm90::tma_load_4d(smem_q + c * kBlockM * 64, &maps.q, 64 * c, int(h), row0, int(b), q_full);
      sm90::PipelineState<kStages> state;
      for (int tile = tile_begin; tile < tile_end; ++tile, state.advance()) {
        pipeline->producer_acquire(state, 2 * Config::kKVBytes);
        Element* k_stage = smem_k + state.stage * (Config::kKVBytes / 2);
        Element* v_stage = smem_v + state.stage * (Config::kKVBytes / 2);
        for (int c = 0; c < kColumnBlocks; ++c) {
          sm90::tma_load_4d(k_stage + c * kBlockN * 64, &maps.k, 64 * c, hk, tile * kBlockN, int(b), &pipeline->full[state.stage]);
          sm90::tma_load_4d(v_stage + c * kBlockN * 64, &maps.v, 64 * c, hk, tile * kBlockN, int(b), &pipeline->full[state.stage]);
        }
      }
    }
    return;
  }

  // -------------------------------------------------------------------------------- consumers
  sm90::warpgroup_registers_increase<240>();
  const int consumer = warpgroup - 1;          // rows consumer * 64 .. + 63 of the block
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, group = lane / 4, quad = lane % 4;
  const int warp_row0 = row0 + consumer * 64 + warp * 16;  // this thread's rows: + group, + group + 8

  constexpr int kSRegs = kBlockN / 2, kORegs = kHeadDim / 2;
  float o[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const ScoreParams score = p.score;
  const bool softcap = score.softcap > 0.f;
  const float log2e = 1.4426950408889634f;

  sm90::mbarrier_wait(q_full, 0);
  sm90::PipelineState<kStages> state;
  for (int tile = tile_begin; tile < tile_end; ++tile, state.advance()) {
    pipeline->consumer_wait(state);
    const Element* k_stage = smem_k + state.stage * (Config::kKVBytes / 2);
    const Element* v_stage = smem_v + state.stage * (Config::kKVBytes / 2);
    const int key0 = tile * kBlockN;

    // S = Q K^T: k16 step j reads column block j / 4 at byte offset 32 * (j % 4).
    float s[kSRegs];
    sm90::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kHeadDim / 16; ++j) {
      const Element* q_step = smem_q + (j / 4) * kBlockM * 64 + consumer * 64 * 64 + (j % 4) * 16;
      const Element* k_step = k_stage + (j / 4) * kBlockN * 64 + (j % 4) * 16;
      sm90::Wgmma<Element, kBlockN>::template ss<0>(s, sm90::kmajor_descriptor(q_step), sm90::kmajor_descriptor(k_step),
                                                    j > 0);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_accumulators(s);

    // Logits and mask. Accumulator 4i + e: row group + 8 (e / 2), key 8i + 2 quad + e % 2.
    const bool full_tile = tile_fully_visible(p.mask, warp_row0, warp_row0 + 16, key0, key0 + kBlockN, sq, sk);
    const float slope = p.alibi_slope(b, h);
#pragma unroll
    for (int i = 0; i < kSRegs; ++i) {
      const int row = warp_row0 + group + 8 * ((i % 4) / 2);
      const int key = key0 + 8 * (i / 4) + 2 * quad + (i % 2);
      float x = softcap ? score_to_logit(score, s[i]) : s[i] * score.scale;
      if (slope != 0.f) x += alibi_bias(slope, row, key, sq, sk);
      if (!full_tile && !key_visible(p.mask, row, key, sq, sk)) x = -INFINITY;
      s[i] = x;
    }

    // Online softmax on the two rows this thread holds (a quad shares each row).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int i = 0; i < kSRegs; ++i)
        if ((i % 4) / 2 == r) tile_max = fmaxf(tile_max, s[i]);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max[r], tile_max);
      const float max_scaled = new_max == -INFINITY ? 0.f : new_max * log2e;
      const float rescale = sm80::fast_exp2(row_max[r] * log2e - max_scaled);
      row_max[r] = new_max;
      row_sum[r] *= rescale;
#pragma unroll
      for (int i = 0; i < kORegs; ++i)
        if ((i % 4) / 2 == r) o[i] *= rescale;
#pragma unroll
      for (int i = 0; i < kSRegs; ++i)
        if ((i % 4) / 2 == r) {
          s[i] = sm80::fast_exp2(s[i] * log2e - max_scaled);
          row_sum[r] += s[i];
        }
    }

    // O += P V: P's k16 step kk is accumulators 8kk .. 8kk + 7; V's step kk starts at key row 16kk
    // (2048 bytes into each column block), column blocks kBlockN * 128 bytes apart.
    // P is packed before the first wgmma: registers written between async wgmmas would make the
    // compiler insert extra warpgroup fences.
    uint32_t p_frag[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) p_frag[kk][e] = sm80::pack2<Element>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      sm90::Wgmma<Element, kHeadDim>::template rs<1>(o, p_frag[kk], sm90::mnmajor_descriptor(v_stage + 16 * kk * 64, kBlockN * 128), 1);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_accumulators(o);
    pipeline->consumer_release(state);
  }

  // Epilogue: normalise, write O (two elements per store) and the LSE.
  Element* out = static_cast<Element*>(p.out.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const bool empty = row_max[r] == -INFINITY || sum == 0.f;
    const float inv = empty ? 0.f : 1.f / sum;
    const int row = warp_row0 + group + 8 * r;
    if (row >= sq) continue;
    Element* out_row = out + p.out.offset(b, row, h);
#pragma unroll
    for (int i = 0; i < kORegs; i += 4) {
      const int col = 8 * (i / 4) + 2 * quad;
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(out_row + col) = sm80::pack2<Element>(o[i + 2 * r] * inv, o[i + 2 * r + 1] * inv);
    }
    if (quad == 0 && p.lse.defined()) p.lse.data[p.lse.offset(b, row, h)] = empty ? -INFINITY : row_max[r] + logf(sum);
  }
#endif
}

}  // namespace flashattn::fa3
