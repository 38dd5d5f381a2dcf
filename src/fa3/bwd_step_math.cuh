// The per-step math of the FA3 backward's consumers (bwd_consumer.cuh, bwd_consumer_wide.cuh):
// where a thread's accumulators sit, P^T and dS^T from S^T and dP^T, the mask decision, the K/V
// tails. dK/dV out: bwd_epilogue.cuh.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "common/mask.h"
#include "common/score.h"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/fwd_softmax.cuh"

namespace flashattn::fa3 {

// Named barrier of the two consumer warpgroups: dS^T of a step complete (and, once, K/V tails cleared).
inline constexpr uint32_t kBwdDsBarrier = 1, kBwdConsumerThreads = 256;
// Alternate dQ (BwdConfig::kDqAlternate): the second dS stage's barrier (bwd_ds_handover).
inline constexpr uint32_t kBwdDsOddBarrier = 6;

// Alternate dQ: the hand-over of a step's dS^T. The warpgroup computing the step's dQ waits
// (bar.sync) until the other has written its half; the other only arrives (bar.arrive) and goes
// on. One barrier per dS stage, because with one id a warpgroup's arrival at step s and its wait
// at step s + 1 could complete a phase between themselves while the other warpgroup is still
// before its wait of step s. With two, a warpgroup's next arrival on a stage's id (step s + 2)
// follows its wait of step s + 1, which needs the other's arrival of step s + 1, which follows the
// other's wait of step s: every phase is one warpgroup's wait and the other's arrival. The same
// chain orders the reuse of a stage: the dQ wgmma of step s is waited for before its warpgroup
// arrives at step s + 1, so it has read the stage before either warpgroup writes it at step s + 2.
__device__ __forceinline__ void bwd_ds_handover(int step, bool computes_dq) {
  if (step & 1) {
    if (computes_dq) sm90::named_barrier_sync(kBwdDsOddBarrier, kBwdConsumerThreads);
    else sm90::named_barrier_arrive(kBwdDsOddBarrier, kBwdConsumerThreads);
  } else {
    if (computes_dq) sm90::named_barrier_sync(kBwdDsBarrier, kBwdConsumerThreads);
    else sm90::named_barrier_arrive(kBwdDsBarrier, kBwdConsumerThreads);
  }
}

// f(std::integral_constant<int, i>{}) for i = 0 .. kCount - 1, unrolled at compile time.
template <int kCount, typename F, int... kI>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, kI...>) {
  (f(std::integral_constant<int, kI>{}), ...);
}
template <int kCount, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl<kCount>(f, std::make_integer_sequence<int, kCount>{});
}

// Where this thread's accumulators sit: its keys (accumulator rows) and its step columns.
struct BwdThread {
  int consumer, warp, lane, quad;
  int key[2];  // keys of accumulator rows 0 and 1 (+ 8)

  // A consumer warpgroup's thread (warpgroup 0 is the producer's); the keys are the kernel's to set.
  static __device__ __forceinline__ BwdThread of_consumer() {
    BwdThread th;
    th.consumer = sm90::warp_uniform(int(threadIdx.x / 128)) - 1;
    th.warp = int(threadIdx.x % 128) / 32;
    th.lane = int(threadIdx.x % 32);
    th.quad = th.lane % 4;
    th.key[0] = th.key[1] = 0;
    return th;
  }
};

// P^T and dS^T of a step from S^T and dP^T: P^T packed into p_frag (the A operand of dV += P^T
// dO), dS^T in place of dp. Plain scores (Config::kGeneralScore false): the exponentials run
// while dP's wgmmas still do (wait_dp comes after them), and P is packed before dP is read: dS is
// formed from the packed P (rounded to the element type, as a framework computing in it rounds
// P), so P's 32-bit values are not live beside dP's. dS leaves out the softmax scale. General: softcap and ALiBi per element after both
// waits, (dP - D) * dlogit/ds formed first so that no third array is live. kMasked: the step's
// tile crosses a mask edge or the last key (one copy per case, a warpgroup-uniform branch, so
// unmasked steps have no per-element tests).
template <typename Config, bool kMasked, int kRegs, typename WaitDp>
__device__ __forceinline__ void bwd_probabilities_and_ds(float (&s)[kRegs], float (&dp)[kRegs], uint32_t (&p_frag)[kRegs / 8][4],
                                                         const BwdThread& th, const BwdArgs& args,
                                                         const AttnProblem& p, const BwdBlock& blk, int h, int row0,
                                                         uint32_t lse_addr, uint32_t delta_addr, WaitDp wait_dp) {
  constexpr float kLog2e = 1.4426950408889634f;
  // Column group i's two rows of LSE or D: one base register, the group in the offset.
  lse_addr += 2 * th.quad * 4;
  delta_addr += 2 * th.quad * 4;
  auto row_pair = [](uint32_t base, auto i) { return sm90::ld_shared_f32x2<decltype(i)::value * 32>(base); };
  if constexpr (!Config::kGeneralScore) {
    const float scale_log2 = p.score.scale * kLog2e;
    static_for<kRegs / 4>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      const float2 lse = row_pair(lse_addr, ic);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * i + e] = fmaf(s[4 * i + e], scale_log2, -(e % 2 ? lse.y : lse.x));
    });
  } else {
    const ScoreFactors& score = args.score_factors;
    const float slope = p.alibi_slope(blk.b, h);
    static_for<kRegs / 4>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      const float2 lse = row_pair(lse_addr, ic), d = row_pair(delta_addr, ic);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = 4 * i + e;
        float grad;
        float logit = logit_with_grad(score, s[j], &grad);
        if (slope != 0.f) logit += alibi_bias_32(slope, row0 + 8 * i + 2 * th.quad + e % 2, th.key[e / 2], blk.sk - blk.sq);
        s[j] = logit * kLog2e - (e % 2 ? lse.y : lse.x);
        dp[j] = (dp[j] - (e % 2 ? d.y : d.x)) * grad;
      }
    });
  }
  if constexpr (kMasked) {
    // The query rows (columns, relative to row0) that see each of this thread's keys, formed here
    // from an opaque key: hoisted out of the step loop, the four bounds would be held (spilled).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const RowKeys rows = key_rows_32(p.mask, int(sm90::opaque_u32(uint32_t(th.key[r]))), blk.sq, blk.sk);
      mask_row_outside<false>(s, r, th.quad, rows.begin - row0, rows.end - row0);
    }
  }
#pragma unroll
  for (int j = 0; j < kRegs; ++j) s[j] = sm80::fast_exp2(s[j]);
  using Element = typename Config::Element;
  sm90::pack_fragments<Element>(p_frag, s);
  if constexpr (!Config::kGeneralScore) {
    wait_dp();
    // Accumulators 4i .. 4i + 3 are pairs (2e, 2e + 1) of fragment i / 2, registers 2 (i % 2) + e / 2.
    static_for<kRegs / 4>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      const float2 d = row_pair(delta_addr, ic);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 prob = sm80::unpack2<Element>(p_frag[i / 2][2 * (i % 2) + h]);
        dp[4 * i + 2 * h] = prob.x * (dp[4 * i + 2 * h] - d.x);
        dp[4 * i + 2 * h + 1] = prob.y * (dp[4 * i + 2 * h + 1] - d.y);
      }
    });
  } else {
#pragma unroll
    for (int j = 0; j < kRegs; ++j) dp[j] *= s[j];
  }
}

// K/V rows past the sequence inside the block: with varlen (the next sequence's rows) or
// seqused_k (rows the caller did not fill, maybe NaN) they are in bounds of the maps, so the TMA
// loads real memory there. Their P and dS are 0, but dQ = dS K and dP = dO V^T would still meet
// them (0 * NaN = NaN): both consumer warpgroups clear those rows of every column block once.
template <typename Config>
__device__ __forceinline__ void bwd_clear_kv_tails(const AttnProblem& p, const BwdBlock& blk, uint32_t k_addr) {
  constexpr int kBlockN = Config::kBlockN;
  const bool clear_tails = (p.lens.cu_seqlens_k != nullptr || p.lens.seqused_k != nullptr) && blk.keys_used < kBlockN;
  if (!clear_tails) return;
  const int bytes = (kBlockN - blk.keys_used) * 128;  // per column block, contiguous from row keys_used
  const int tid = int(threadIdx.x) - 128;
#pragma unroll 1
  for (int i = tid * 16; i < 2 * Config::kColumnBlocks * bytes; i += int(kBwdConsumerThreads) * 16) {
    const int block = i / bytes;  // column blocks of K, then of V (adjacent tiles)
    sm90::st_shared_zero16(k_addr + block * (kBlockN * 128) + blk.keys_used * 128 + (i - block * bytes));
  }
  sm90::fence_async_shared();
  sm90::named_barrier_sync(kBwdDsBarrier, kBwdConsumerThreads);
}

// Whether every (row, key) of a step's tile (kKeys keys from key0, kRows rows from row0) is visible
// (tile_fully_visible in 32 bits: the launch clamps the windows and keeps rows + keys below 2^31):
// then it needs no per-element mask.
template <int kRows, int kKeys = 64>
__device__ __forceinline__ bool bwd_tile_unmasked(const AttnProblem& p, const BwdBlock& blk, int key0, int row0) {
  const int rows_end = row0 + kRows < blk.sq ? row0 + kRows : blk.sq;
  const int shift = blk.sk - blk.sq;
  return key0 + kKeys <= blk.sk && (p.mask.window_right < 0 || key0 + kKeys - 1 <= row0 + shift + p.mask.window_right) &&
         (p.mask.window_left < 0 || key0 >= rows_end - 1 + shift - p.mask.window_left);
}

// A step's P^T and dS^T once its S^T and dP^T wgmmas are issued (dP^T's may still run; general
// scores wait for both first): P^T packed into p_frag, dS^T into ds_frag, on the masked copy only
// where the step's tile (64 keys from key0, 2 kRegs rows from row0) crosses a mask edge. The wide
// and the 64-row consumers share it; the rows-on-M consumer takes its own (bwd_consumer_rows.cuh).
template <typename Config, int kRegs>
__device__ __forceinline__ void bwd_step_p_ds(float (&s)[kRegs], float (&dp)[kRegs], uint32_t (&p_frag)[kRegs / 8][4],
                                              uint32_t (&ds_frag)[kRegs / 8][4], const BwdThread& th, const BwdArgs& args,
                                              const AttnProblem& p, const BwdBlock& blk, int h, int key0, int row0,
                                              uint32_t lse_addr, uint32_t delta_addr) {
  auto wait_dp = [&] {
    sm90::wgmma_wait<0>();
    sm90::fence_accumulators(dp);
  };
  if constexpr (!Config::kGeneralScore) {
    sm90::wgmma_wait<1>();  // S^T; dP^T may still run
    sm90::fence_accumulators(s);
  } else {
    wait_dp();
    sm90::fence_accumulators(s);
  }
  if (bwd_tile_unmasked<2 * kRegs>(p, blk, key0, row0))
    bwd_probabilities_and_ds<Config, false>(s, dp, p_frag, th, args, p, blk, h, row0, lse_addr, delta_addr, [&] {
      if constexpr (!Config::kGeneralScore) wait_dp();
    });
  else
    bwd_probabilities_and_ds<Config, true>(s, dp, p_frag, th, args, p, blk, h, row0, lse_addr, delta_addr, [&] {
      if constexpr (!Config::kGeneralScore) wait_dp();
    });
  sm90::pack_fragments<typename Config::Element>(ds_frag, dp);
}

}  // namespace flashattn::fa3
