// The FA3 backward's consumer mainloop with the step's rows on the wgmma M side
// (BwdVariant::rows_on_m; d256, plain scores): 80 keys per CTA, S and dP split by keys between
// the two warpgroups, dK, dV and dQ by columns. Per step (query rows row0 .. row0 + 63 of one
// head), warpgroup c with keys 40c .. 40c + 39 of the block and columns 128c .. 128c + 127:
//   S  = Q K_c^T, dP = dO V_c^T       64 rows (M) x its 40 keys (N), both operands K-major
//   P, dS = P o (dP - D)               two rows per thread: one LSE and one D load per row
//   P^T, dS^T                          stored transposed (stmatrix .trans) into [80 keys][64 rows]
//                                      tiles, rows 40c .. of them; both halves meet there
//   dQ_c = dS K[:, c]                  two 64-column slices (A = dS^T read transposed), each
//                                      added to the fp32 workspace from registers as the wide
//                                      consumer does; slice 0 issued first, its adds beside dV's
//                                      and dK's
//   dV_c^T += dO[:, c]^T P, dK_c^T += Q[:, c]^T dS   per 64-column block: M = columns, N = 80
//                                      keys, K = 64 rows (A MN-major from the dO / Q tile, B
//                                      K-major from P^T / dS^T)
// dK^T and dV^T of 128 columns x 80 keys stay in registers over every step (80 + 80); the
// epilogue stores them transposed into the K and V tiles for the TMA stores.
#pragma once

#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "arch/sm90/wgmma_gemm.cuh"
#include "common/mask.h"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/bwd_consumer_wide.cuh"
#include "fa3/bwd_epilogue.cuh"
#include "fa3/bwd_producer.cuh"
#include "fa3/bwd_step_math.cuh"
#include "fa3/fwd_softmax.cuh"

namespace flashattn::fa3 {

// P and dS of a step with rows on M, from S and dP (kRegs accumulators: rows 16 warp + lane / 4
// (+ 8), keys 8i + 2 quad (+ 1) from key_first), packed in pairs for the transposed stores:
// p[2i + h], ds[2i + h] hold accumulator pair (4i + 2h, + 1). dS leaves out the softmax scale, and
// is formed from the packed P (as bwd_probabilities_and_ds does). The exponentials run while dP's
// wgmmas still do (wait_dp after them). kMasked: the warpgroup's part of the tile crosses a mask
// edge or the last key (a warpgroup-uniform branch).
template <typename Config, bool kMasked, int kRegs, typename WaitDp>
__device__ __forceinline__ void bwd_rows_probabilities_and_ds(float (&s)[kRegs], float (&dp)[kRegs], uint32_t (&p)[kRegs / 2],
                                                              uint32_t (&ds)[kRegs / 2], const BwdThread& th, const AttnProblem& prob,
                                                              const BwdBlock& blk, int row0, int key_first, uint32_t lse_addr,
                                                              uint32_t delta_addr, WaitDp wait_dp) {
  using Element = typename Config::Element;
  constexpr float kLog2e = 1.4426950408889634f;
  const uint32_t row_bytes = uint32_t(16 * th.warp + th.lane / 4) * 4;
  const float scale_log2 = prob.score.scale * kLog2e;
  float lse[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) lse[h] = __int_as_float(sm90::ld_shared_s32(lse_addr + row_bytes + 32 * h));
#pragma unroll
  for (int j = 0; j < kRegs; ++j) s[j] = fmaf(s[j], scale_log2, -lse[(j % 4) / 2]);
  if constexpr (kMasked) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowKeys keys = row_keys_32(prob.mask, row0 + 16 * th.warp + th.lane / 4 + 8 * h, blk.sq, blk.sk);
      mask_row_outside<false>(s, h, th.quad, keys.begin - key_first, keys.end - key_first);
    }
  }
#pragma unroll
  for (int j = 0; j < kRegs; ++j) s[j] = sm80::fast_exp2(s[j]);
#pragma unroll
  for (int i = 0; i < kRegs / 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) p[2 * i + h] = sm80::pack2<Element>(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]);
  wait_dp();
  float d[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) d[h] = __int_as_float(sm90::ld_shared_s32(delta_addr + row_bytes + 32 * h));
#pragma unroll
  for (int i = 0; i < kRegs / 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 pr = sm80::unpack2<Element>(p[2 * i + h]);
      ds[2 * i + h] = sm80::pack2<Element>(pr.x * (dp[4 * i + 2 * h] - d[h]), pr.y * (dp[4 * i + 2 * h + 1] - d[h]));
    }
}

template <typename Config>
__device__ __forceinline__ void bwd_consume_rows(const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm, float (&dk)[2][40],
                                                 float (&dv)[2][40], const BwdThread& th) {
  using Element = typename Config::Element;
  using QState = sm90::PipelineState<Config::kStages>;
  using DoState = sm90::PipelineState<Config::kDoStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr int kKeys = kBlockN / 2;  // this warpgroup's keys of S and dP
  constexpr int kSRegs = kKeys / 2;
  constexpr int kCols = Config::kDqCols;  // its columns of dK, dV and dQ
  constexpr int kDqSlices = 2, kDqRegs = kCols / kDqSlices / 2;  // dQ's column slices: two of 64
  static_assert(kBlockN == 80 && kBlockM == 64 && kCols == 128 && kHeadDim == 256, "rows on M: 64 x 80 steps at d256");
  const AttnProblem& p = args.problem.fwd;
  const int c = th.consumer;
  const int col0 = c * kCols, first_block = col0 / 64;
  const uint32_t k_addr = sm.addr(0), v_addr = sm.addr(Config::kOffsetV);
  const int key_first = blk.key0 + c * kKeys;

  sm90::mbarrier_wait(sm.kv_full(), 0);
  bwd_clear_kv_tails<Config>(p, blk, k_addr);

  bwd_for_each_step(blk, [&](uint32_t step, int, int h, int m) {
    const QState qst = QState::at(step);
    const DoState dst = DoState::at(step);
    const int row0 = m * kBlockM;
    const uint32_t q_tile = sm.addr(Config::kOffsetQ + qst.stage * Config::kQBytes);
    const uint32_t do_tile = sm.addr(Config::kOffsetDo + dst.stage * Config::kQBytes);
    const uint32_t ds_tile = sm.addr(Config::kOffsetDs + (step % Config::kDsStages) * Config::kDsBytes);
    const uint32_t p_tile = sm.addr(Config::kOffsetP + (step % Config::kDsStages) * Config::kPBytes);

    // S = Q K_c^T, dP = dO V_c^T: all 64 rows, this warpgroup's 40 keys.
    float s[kSRegs], dp[kSRegs];
    sm.q_ring()->consumer_wait(qst);
    sm90::wgmma_kk<Element, kKeys, kHeadDim, true>(s, q_tile, kBlockM * 128, k_addr + c * kKeys * 128, kBlockN * 128);
    sm.do_ring()->consumer_wait(dst);
    sm90::wgmma_kk<Element, kKeys, kHeadDim, true>(dp, do_tile, kBlockM * 128, v_addr + c * kKeys * 128, kBlockN * 128);
    sm90::wgmma_wait<1>();  // S; dP may still run
    sm90::fence_accumulators(s);
    auto wait_dp = [&] {
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(dp);
    };
    const uint32_t lse_addr = sm90::smem_u32(sm.lse(qst.stage)), delta_addr = sm90::smem_u32(sm.delta(dst.stage));
    uint32_t p_pairs[kSRegs / 2], ds_pairs[kSRegs / 2];
    if (bwd_tile_unmasked<kBlockM, kKeys>(p, blk, key_first, row0))
      bwd_rows_probabilities_and_ds<Config, false>(s, dp, p_pairs, ds_pairs, th, p, blk, row0, key_first, lse_addr, delta_addr, wait_dp);
    else
      bwd_rows_probabilities_and_ds<Config, true>(s, dp, p_pairs, ds_pairs, th, p, blk, row0, key_first, lse_addr, delta_addr, wait_dp);
    // P^T and dS^T: this warpgroup's 40 keys are rows 40c .. of the [80 keys][64 rows] tiles.
    sm90::store_pairs_transposed_sw128<kKeys / 8>(p_tile + c * kKeys * 128, p_pairs, th.warp, th.lane);
    sm90::store_pairs_transposed_sw128<kKeys / 8>(ds_tile + c * kKeys * 128, ds_pairs, th.warp, th.lane);
    sm90::fence_async_shared();
    sm90::named_barrier_sync(kBwdDsBarrier, kBwdConsumerThreads);  // both halves written

    // dQ_c = dS K[:, c] in two 64-column slices; slice 0 first, so that its adds run beside
    // the dV_c^T += dO_c^T P and dK_c^T += Q_c^T dS wgmmas (per 64-column block). The fences
    // that end those wgmmas (release_stages) come before slice 1 starts: beside a live slice
    // their 160 registers would spill it.
    auto dq_slice = [&](float (&dq)[kDqRegs], int slice) {
      const int col = slice * 2 * kDqRegs;  // the slice's first column among this warpgroup's
      sm90::wgmma_mm<Element, 2 * kDqRegs, kBlockN, true>(
          dq, ds_tile, kBlockN * 128, k_addr + (first_block + col / 64) * kBlockN * 128 + (col % 64) * 2, kBlockN * 128);
    };
    auto release_stages = [&] {  // dV and dK done: the step's Q and dO stages are free
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        sm90::fence_accumulators(dv[t]);
        sm90::fence_accumulators(dk[t]);
      }
      sm.do_ring()->consumer_release(dst);
      sm.q_ring()->consumer_release(qst);
    };
    float dq[kDqRegs];
    dq_slice(dq, 0);
#pragma unroll
    for (int t = 0; t < 2; ++t)
      sm90::wgmma_mk<Element, kBlockN, kBlockM>(dv[t], do_tile + (first_block + t) * kBlockM * 128, p_tile, step > 0);
#pragma unroll
    for (int t = 0; t < 2; ++t)
      sm90::wgmma_mk<Element, kBlockN, kBlockM>(dk[t], q_tile + (first_block + t) * kBlockM * 128, ds_tile, step > 0);
    sm90::wgmma_wait<4>();  // slice 0 (groups complete in order); dV and dK may still run
    sm90::fence_accumulators(dq);
    bwd_add_dq_wide<Config>(args, blk, h, row0, col0, 0, dq);
    sm90::wgmma_wait<0>();
    release_stages();
    dq_slice(dq, 1);
    sm90::wgmma_wait<0>();
    sm90::fence_accumulators(dq);
    bwd_add_dq_wide<Config>(args, blk, h, row0, col0, 1, dq);
  });
}

// The consumer warpgroup's whole part: the steps, then its columns of dK and dV.
template <typename Config>
__device__ __forceinline__ void bwd_consumer_rows(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk,
                                                  const BwdSmem<Config>& sm) {
  BwdThread th = BwdThread::of_consumer();
  // (keys are accumulator columns here: th.key is not used)
  float dk[2][40], dv[2][40];  // started by the first step's wgmmas (see bwd_consumer)
  const bool any_step = blk.steps() > 0;
  if (any_step) bwd_consume_rows<Config>(args, blk, sm, dk, dv, th);
  bwd_epilogue_transposed<Config>(maps, args, blk, sm, th, th.consumer * Config::kDqCols, dk, dv, any_step);
}

}  // namespace flashattn::fa3
