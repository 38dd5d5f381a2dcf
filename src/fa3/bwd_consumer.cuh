// The FA3 backward's consumer mainloop: one warpgroup's 64 keys of the CTA's key block, dK and dV
// in registers over every step. Per step (query rows row0 .. row0 + kBlockM - 1 of one head):
//   S^T  = K_c Q^T      wgmma, both operands K-major in shared memory (keys are the M side, so P
//   dP^T = V_c dO^T     and dS come out transposed, as dV and dK take them from registers)
//   P^T  = exp2(S^T * scale * log2(e) - LSE * log2(e)),  dS^T = P^T o (dP^T - D) [x dlogit/ds]
//   dV  += P^T dO       A from registers, dO MN-major
//   dK  += dS^T Q       A from registers, Q MN-major
//   dQ_c = dS K         dS^T of both warpgroups through shared memory (MN-major A: transposed),
//                       K MN-major; this warpgroup's 64 x kDqCols chunk, staged for the dQ writer.
// Accumulator element j of thread (warp, lane) in an m64nN tile: row 16 warp + lane / 4 + 8 (j % 4
// / 2) (a key), column 8 (j / 4) + 2 (lane % 4) + j % 2 (a query row of the step).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "arch/sm80/math.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "arch/sm90/wgmma_gemm.cuh"
#include "common/mask.h"
#include "common/score.h"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/bwd_dq_writer.cuh"
#include "fa3/bwd_producer.cuh"
#include "fa3/fwd_softmax.cuh"

namespace flashattn::fa3 {

// Named barrier of the two consumer warpgroups: dS^T of a step complete (and, once, K/V tails cleared).
inline constexpr uint32_t kBwdDsBarrier = 1, kBwdConsumerThreads = 256;

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
      mask_row_outside(s, r, th.quad, rows.begin - row0, rows.end - row0);
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

// The steps of one consumer warpgroup: dk and dv accumulate over all of them.
template <typename Config>
__device__ __forceinline__ void bwd_consume(const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm,
                                            float (&dk)[Config::kHeadDim / 2], float (&dv)[Config::kHeadDim / 2], const BwdThread& th) {
  using Element = typename Config::Element;
  using State = sm90::PipelineState<Config::kStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr int kSRegs = kBlockM / 2, kDqRegs = Config::kDqCols / 2;
  const AttnProblem& p = args.problem.fwd;
  const int c = th.consumer;
  const uint32_t k_addr = sm.addr(0), v_addr = sm.addr(Config::kOffsetV);
  // This warpgroup's dQ chunk: rows 64 qb of the step, columns cb * kDqCols (bwd_config.h).
  const int qb = Config::kDqSplitKeys ? 0 : c / Config::kDqColChunks, cb = Config::kDqSplitKeys ? 0 : c % Config::kDqColChunks;

  // K/V rows past the sequence inside the block: with varlen (the next sequence's rows) or
  // seqused_k (rows the caller did not fill, maybe NaN) they are in bounds of the maps, so the TMA
  // loads real memory there. Their P and dS are 0, but dQ = dS K and dP = dO V^T would still meet
  // them (0 * NaN = NaN): both consumer warpgroups clear those rows of every column block once.
  sm90::mbarrier_wait(sm.kv_full(), 0);
  const bool clear_tails = (p.lens.cu_seqlens_k != nullptr || p.lens.seqused_k != nullptr) && blk.keys_used < kBlockN;
  if (clear_tails) {
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


  int step = 0;
#pragma unroll 1
  for (int g = 0; g < blk.heads_per_group; ++g) {
    const int h = blk.hk * blk.heads_per_group + g;
#pragma unroll 1
    for (int m = blk.m_begin; m < blk.m_end; ++m, ++step) {
      const State st = State::at(uint32_t(step));
      const int row0 = m * kBlockM;
      const uint32_t q_tile = sm.addr(Config::kOffsetQ + st.stage * Config::kQBytes);
      const uint32_t do_tile = sm.addr(Config::kOffsetDo + st.stage * Config::kQBytes);
      const uint32_t ds_tile = sm.addr(Config::kOffsetDs + (step % Config::kDsStages) * Config::kDsBytes);

      // S^T = K_c Q^T, dP^T = V_c dO^T (this warpgroup's 64 rows of K and V).
      float s[kSRegs], dp[kSRegs];
      sm.q_ring()->consumer_wait(st);
      sm90::wgmma_kk<Element, kBlockM, kHeadDim, true>(s, k_addr + c * 64 * 128, kBlockN * 128, q_tile, kBlockM * 128);
      sm.do_ring()->consumer_wait(st);
      sm90::wgmma_kk<Element, kBlockM, kHeadDim, true>(dp, v_addr + c * 64 * 128, kBlockN * 128, do_tile, kBlockM * 128);

      const uint32_t lse_addr = sm90::smem_u32(sm.lse(st.stage)), delta_addr = sm90::smem_u32(sm.delta(st.stage));
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
      // Every (row, key) of the step visible (tile_fully_visible in 32 bits: the launch clamps the
      // windows and keeps rows + keys below 2^31): no per-element mask.
      const int rows_end = row0 + kBlockM < blk.sq ? row0 + kBlockM : blk.sq;
      const int keyw0 = blk.key0 + 64 * c, shift = blk.sk - blk.sq;
      const bool unmasked = keyw0 + 64 <= blk.sk && (p.mask.window_right < 0 || keyw0 + 63 <= row0 + shift + p.mask.window_right) &&
                            (p.mask.window_left < 0 || keyw0 >= rows_end - 1 + shift - p.mask.window_left);
      uint32_t p_frag[kBlockM / 16][4], ds_frag[kBlockM / 16][4];
      if (unmasked)
        bwd_probabilities_and_ds<Config, false>(s, dp, p_frag, th, args, p, blk, h, row0, lse_addr, delta_addr, [&] {
          if constexpr (!Config::kGeneralScore) wait_dp();
        });
      else
        bwd_probabilities_and_ds<Config, true>(s, dp, p_frag, th, args, p, blk, h, row0, lse_addr, delta_addr, [&] {
          if constexpr (!Config::kGeneralScore) wait_dp();
        });
      sm90::pack_fragments<Element>(ds_frag, dp);
      // dS^T of this warpgroup's keys into the step's dS tile: [kBlockM / 64][kBlockN keys][64 rows].
      sm90::store_fragments_sw128<kBlockM, kBlockN * 128>(ds_tile + c * 64 * 128, ds_frag, th.warp, th.lane);

      // dV += P^T dO.
      sm90::wgmma_rk<Element, kHeadDim, kBlockM>(dv, p_frag, do_tile, kBlockM * 128, step > 0);
      // Both warpgroups' dS^T written (fenced for the async proxy) before either's dQ reads it.
      sm90::fence_async_shared();
      sm90::named_barrier_sync(kBwdDsBarrier, kBwdConsumerThreads);
      // dQ chunk = dS K: A = dS^T's column block qb read transposed (M = rows, K = keys), B = K's
      // column blocks from cb (K = keys, N = head dim).
      float dq[kDqRegs];
      if constexpr (Config::kDqSplitKeys)  // this warpgroup's 64 keys only
        sm90::wgmma_mm<Element, Config::kDqCols, 64, true>(dq, ds_tile + c * 64 * 128, kBlockN * 128, k_addr + c * 64 * 128,
                                                            kBlockN * 128);
      else
        sm90::wgmma_mm<Element, Config::kDqCols, kBlockN, true>(dq, ds_tile + qb * kBlockN * 128, kBlockN * 128,
                                                                 k_addr + cb * (Config::kDqCols / 64) * kBlockN * 128, kBlockN * 128);
      // dK += dS^T Q.
      sm90::wgmma_rk<Element, kHeadDim, kBlockM>(dk, ds_frag, q_tile, kBlockM * 128, step > 0);

      sm90::wgmma_wait<1>();  // dV and dQ done; dK may still run
      sm90::fence_accumulators(dv);
      sm90::fence_accumulators(dq);
      sm90::fence_fragments(p_frag);
      __syncwarp();
      if (th.lane == 0) sm.do_ring()->consumer_release(st);
      // The chunk to the dQ writer: thread t's accumulators 4k .. 4k + 3 at float (128 k + t) * 4.
      const uint32_t dq_stage = sm.addr(Config::kOffsetDq + c * Config::kDqBytes) + (threadIdx.x % 128) * 16;
      if (c == 0) sm90::named_barrier_sync(kBwdDqEmptyBarrier + 0, kBwdDqBarrierThreads);
      else sm90::named_barrier_sync(kBwdDqEmptyBarrier + 1, kBwdDqBarrierThreads);
#pragma unroll
      for (int k = 0; k < kDqRegs / 4; ++k) sm90::st_shared_f32x4(dq_stage + k * 2048, dq[4 * k], dq[4 * k + 1], dq[4 * k + 2], dq[4 * k + 3]);
      sm90::fence_async_shared();
      if (c == 0) sm90::named_barrier_arrive(kBwdDqFullBarrier + 0, kBwdDqBarrierThreads);
      else sm90::named_barrier_arrive(kBwdDqFullBarrier + 1, kBwdDqBarrierThreads);

      sm90::wgmma_wait<0>();  // dK
      sm90::fence_accumulators(dk);
      sm90::fence_fragments(ds_frag);
      __syncwarp();
      if (th.lane == 0) sm.q_ring()->consumer_release(st);
    }
  }
}

// The consumer warpgroup's whole part: the steps, then dK and dV to global memory.
template <typename Config>
__device__ __forceinline__ void bwd_consumer(const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm) {
  using Element = typename Config::Element;
  constexpr int kHeadDim = Config::kHeadDim, kAccRegs = kHeadDim / 2;
  const AttnProblem& p = args.problem.fwd;
  BwdThread th;
  th.consumer = int(threadIdx.x / 128) - 1;
  th.warp = int(threadIdx.x % 128) / 32;
  th.lane = int(threadIdx.x % 32);
  th.quad = th.lane % 4;
  const int key_local = 64 * th.consumer + 16 * th.warp + th.lane / 4;  // accumulator row 0's key in the block
  th.key[0] = blk.key0 + key_local;
  th.key[1] = th.key[0] + 8;
  // The first step's wgmmas start dk and dv (no zeroing: zero constants get hoisted above the
  // register increase, where only the entry's 168 registers exist, and spill).
  float dk[kAccRegs], dv[kAccRegs];
  const bool any_step = blk.steps() > 0;
  if (any_step) bwd_consume<Config>(args, blk, sm, dk, dv, th);

  // dK (plain scores: times the softmax scale left out of dS) and dV of every stored key of the
  // block, two elements per store; keys past seqused_k or seen by no row get 0.
  const float dk_scale = Config::kGeneralScore ? 1.f : p.score.scale;
  const BwdProblem& bp = args.problem;
  Element* dk_out = static_cast<Element*>(bp.dk.data);
  Element* dv_out = static_cast<Element*>(bp.dv.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = th.key[r];
    if (key >= blk.stored_k) continue;
    Element* dk_row = dk_out + bp.dk.offset(blk.b, key, blk.hk);
    Element* dv_row = dv_out + bp.dv.offset(blk.b, key, blk.hk);
#pragma unroll
    for (int i = 0; i < kAccRegs / 4; ++i) {
      const int col = 8 * i + 2 * th.quad;
      // (selects, not products: without steps dk and dv hold whatever their registers held)
      if (col < p.head_dim)
        *reinterpret_cast<uint32_t*>(dk_row + col) = sm80::pack2<Element>(any_step ? dk[4 * i + 2 * r] * dk_scale : 0.f,
                                                                          any_step ? dk[4 * i + 2 * r + 1] * dk_scale : 0.f);
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(dv_row + col) =
            sm80::pack2<Element>(any_step ? dv[4 * i + 2 * r] : 0.f, any_step ? dv[4 * i + 2 * r + 1] : 0.f);
    }
  }
}

}  // namespace flashattn::fa3
