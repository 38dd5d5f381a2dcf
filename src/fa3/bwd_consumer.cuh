// The FA3 backward's consumer mainloop: one warpgroup's 64 keys of the CTA's key block, dK and dV
// in registers over every step. Per step (query rows row0 .. row0 + kBlockM - 1 of one head):
//   S^T  = K_c Q^T      wgmma, both operands K-major in shared memory (keys are the M side, so P
//   dP^T = V_c dO^T     and dS come out transposed, as dV and dK take them from registers)
//   P^T  = exp2(S^T * scale * log2(e) - LSE * log2(e)),  dS^T = P^T o (dP^T - D) [x dlogit/ds]
//   dV  += P^T dO       A from registers, dO MN-major
//   dK  += dS^T Q       A from registers, Q MN-major
//   dQ_c = dS K         dS^T of both warpgroups through shared memory (MN-major A: transposed),
//                       K MN-major; this warpgroup's 64 x kDqCols chunk, staged for the dQ writer
//                       (kDqAlternate: only warpgroup step % 2 computes it, over all the keys).
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
#include "fa3/bwd_epilogue.cuh"
#include "fa3/bwd_producer.cuh"
#include "fa3/bwd_step_math.cuh"

namespace flashattn::fa3 {

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
  const int qb = Config::kDqOneChunk ? 0 : c / Config::kDqColChunks, cb = Config::kDqOneChunk ? 0 : c % Config::kDqColChunks;

  sm90::mbarrier_wait(sm.kv_full(), 0);
  bwd_clear_kv_tails<Config>(p, blk, k_addr);

  bwd_for_each_step(blk, [&](uint32_t step, int, int h, int m) {
    const State st = State::at(step);
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
    uint32_t p_frag[kBlockM / 16][4], ds_frag[kBlockM / 16][4];
    bwd_step_p_ds<Config>(s, dp, p_frag, ds_frag, th, args, p, blk, h, blk.key0 + 64 * c, row0, lse_addr, delta_addr);
    // dS^T of this warpgroup's keys into the step's dS tile: [kBlockM / 64][kBlockN keys][64 rows].
    sm90::store_fragments_sw128<kBlockM, kBlockN * 128>(ds_tile + c * 64 * 128, ds_frag, th.warp, th.lane);

    // dV += P^T dO.
    sm90::wgmma_rk<Element, kHeadDim, kBlockM>(dv, p_frag, do_tile, kBlockM * 128, step > 0);
    // Both warpgroups' dS^T written (fenced for the async proxy) before a dQ reads it.
    sm90::fence_async_shared();
    // Alternate dQ: only warpgroup step % 2 reads the step's dS (bwd_ds_handover).
    const bool computes_dq = !Config::kDqAlternate || int(step & 1) == c;
    if constexpr (Config::kDqAlternate) bwd_ds_handover(step, computes_dq);
    else sm90::named_barrier_sync(kBwdDsBarrier, kBwdConsumerThreads);
    // dQ chunk = dS K: A = dS^T's column block qb read transposed (M = rows, K = keys), B = K's
    // column blocks from cb (K = keys, N = head dim).
    float dq[kDqRegs];
    if constexpr (Config::kDqSplitKeys)  // this warpgroup's 64 keys only
      sm90::wgmma_mm<Element, Config::kDqCols, 64, true>(dq, ds_tile + c * 64 * 128, kBlockN * 128, k_addr + c * 64 * 128,
                                                          kBlockN * 128);
    else if (computes_dq)
      sm90::wgmma_mm<Element, Config::kDqCols, kBlockN, true>(dq, ds_tile + qb * kBlockN * 128, kBlockN * 128,
                                                               k_addr + cb * (Config::kDqCols / 64) * kBlockN * 128, kBlockN * 128);
    // dK += dS^T Q.
    sm90::wgmma_rk<Element, kHeadDim, kBlockM>(dk, ds_frag, q_tile, kBlockM * 128, step > 0);

    sm90::wgmma_wait<1>();  // dV and dQ done (without a dQ: dV); dK may still run
    sm90::fence_accumulators(dv);
    if (computes_dq) sm90::fence_accumulators(dq);
    sm90::fence_fragments(p_frag);
    sm.do_ring()->consumer_release(st);
    if (computes_dq) {
      // The chunk to the dQ writer: thread t's accumulators 4k .. 4k + 3 at float (128 k + t) * 4.
      const uint32_t dq_stage = sm.addr(Config::kOffsetDq + c * Config::kDqBytes) + (threadIdx.x % 128) * 16;
      if (c == 0) sm90::named_barrier_sync(kBwdDqEmptyBarrier + 0, kBwdDqBarrierThreads);
      else sm90::named_barrier_sync(kBwdDqEmptyBarrier + 1, kBwdDqBarrierThreads);
#pragma unroll
      for (int k = 0; k < kDqRegs / 4; ++k)
        sm90::st_shared_f32x4(dq_stage + k * 2048, dq[4 * k], dq[4 * k + 1], dq[4 * k + 2], dq[4 * k + 3]);
      sm90::fence_async_shared();
      if (c == 0) sm90::named_barrier_arrive(kBwdDqFullBarrier + 0, kBwdDqBarrierThreads);
      else sm90::named_barrier_arrive(kBwdDqFullBarrier + 1, kBwdDqBarrierThreads);
    }

    sm90::wgmma_wait<0>();  // dK
    sm90::fence_accumulators(dk);
    sm90::fence_fragments(ds_frag);
    sm.q_ring()->consumer_release(st);
  });
}

// The consumer warpgroup's whole part: the steps, then dK and dV to global memory.
template <typename Config>
__device__ __forceinline__ void bwd_consumer(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm) {
  constexpr int kHeadDim = Config::kHeadDim, kAccRegs = kHeadDim / 2;
  BwdThread th = BwdThread::of_consumer();
  const int key_local = 64 * th.consumer + 16 * th.warp + th.lane / 4;  // accumulator row 0's key in the block
  th.key[0] = blk.key0 + key_local;
  th.key[1] = th.key[0] + 8;
  // The first step's wgmmas start dk and dv (no zeroing: zero constants get hoisted above the
  // register increase, where only the entry's 168 registers exist, and spill).
  float dk[kAccRegs], dv[kAccRegs];
  const bool any_step = blk.steps() > 0;
  if (any_step) bwd_consume<Config>(args, blk, sm, dk, dv, th);

  bwd_epilogue<Config>(maps, args, blk, sm, th, 64 * th.consumer, 0, dk, dv, any_step);
}

}  // namespace flashattn::fa3
