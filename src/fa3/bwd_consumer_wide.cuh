// The FA3 backward's consumer mainloop at head dims over 128 (BwdConfig::kWide): both consumer
// warpgroups share one block of 64 keys and split the head dim. Per step (query rows row0 ..
// row0 + 63 of one head), warpgroup c:
//   S^T  = K Q_c^T, dP^T = V dO_c^T   all 64 keys (M) x its 32 rows (N = 32) of the step
//   P^T, dS^T                          as the narrow consumer (bwd_step_math.cuh), into shared
//                                      memory: columns 32c .. 32c + 31 of 64 x 64 tiles
//   dV_c += P^T dO[:, c],  dK_c += dS^T Q[:, c]   its half of the columns, A from shared memory
//   dQ_c  = dS K[:, c]                 in two 64-column slices, each added to the fp32 workspace
//                                      straight from registers (kDqOverlap: slice 0 before dV
//                                      and dK, its adds beside their wgmmas)
//                                      (red.global.add.v4; in the deterministic mode in the key
//                                      blocks' order, kept by the dQ writer warp)
// dK and dV of 64 keys x half the columns stay in registers over every step (64 + 64 at d256).
#pragma once

#include <cstdint>

#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/reduce.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "arch/sm90/wgmma_gemm.cuh"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/bwd_dq_layout.h"
#include "fa3/bwd_dq_writer.cuh"
#include "fa3/bwd_epilogue.cuh"
#include "fa3/bwd_producer.cuh"
#include "fa3/bwd_step_math.cuh"

namespace flashattn::fa3 {

// This warpgroup's dQ chunk added to the workspace: thread t's accumulators 4k .. 4k + 3 are
// the float4 at (128 k + t) * 4 of the chunk (bwd_dq_layout.h). `slice`: which of the chunk's
// column slices of 2 kRegs columns dq holds (the dQ GEMM runs in slices: the whole chunk's 64
// accumulators beside dK's and dV's spill). In the deterministic mode the dQ writer warps keep the
// order (bwd_order_dq_wide): both warpgroups wait for the go before the first slice, and tell the
// writers after the last (no fence here: the counting writer's fence releases these adds).
template <typename Config, int kRegs>
__device__ __forceinline__ void bwd_add_dq_wide(const BwdArgs& args, const BwdBlock& blk, int h, int row0, int col0, int slice,
                                                const float (&dq)[kRegs]) {
  const AttnProblem& p = args.problem.fwd;
  const int64_t bh = int64_t(blk.b) * p.heads_q + h;
  if (args.deterministic && slice == 0) sm90::named_barrier_sync(kBwdDqGoBarrier, kBwdDqOrderThreads);
  float* chunk = args.dq_accum + dq_chunk_offset(bh * args.rows_padded + row0, col0, Config::kDqCols, Config::kHeadDim) +
                 (threadIdx.x % 128) * 4 + slice * (kRegs / 4) * 512;
  static_for<kRegs / 4>([&](auto kc) {
    constexpr int k = decltype(kc)::value;
    const float4 v = make_float4(dq[4 * k], dq[4 * k + 1], dq[4 * k + 2], dq[4 * k + 3]);
    sm90::red_add_v4_at<k * 512 * 4>(chunk, v);
  });
  if (args.deterministic && slice == Config::kDqCols / (2 * kRegs) - 1) sm90::named_barrier_arrive(kBwdDqDoneBarrier, kBwdDqOrderThreads);
}

template <typename Config>
__device__ __forceinline__ void bwd_consume_wide(const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm,
                                                 float (&dk)[Config::kDqCols / 2], float (&dv)[Config::kDqCols / 2], const BwdThread& th) {
  using Element = typename Config::Element;
  using State = sm90::PipelineState<Config::kStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr int kRows = kBlockM / 2;        // this warpgroup's rows of a step
  constexpr int kCols = Config::kDqCols;    // its columns of dK, dV and dQ
  constexpr int kSRegs = kRows / 2, kAccRegs = kCols / 2;
  static_assert(kBlockN == 64 && kBlockM == 64 && kCols == 128, "wide tiles: 64 keys, 64 rows, two 64-column slices per warpgroup");
  const AttnProblem& p = args.problem.fwd;
  const int c = th.consumer;
  const int col0 = c * kCols, first_block = col0 / 64;
  const uint32_t k_addr = sm.addr(0), v_addr = sm.addr(Config::kOffsetV);

  sm90::mbarrier_wait(sm.kv_full(), 0);
  bwd_clear_kv_tails<Config>(p, blk, k_addr);

  bwd_for_each_step(blk, [&](uint32_t step, int, int h, int m) {
    const State st = State::at(step);
    const int row0 = m * kBlockM, rows0 = row0 + c * kRows;  // the step's and this warpgroup's first row
    const uint32_t q_tile = sm.addr(Config::kOffsetQ + st.stage * Config::kQBytes);
    const uint32_t do_tile = sm.addr(Config::kOffsetDo + st.stage * Config::kQBytes);
    const uint32_t ds_tile = sm.addr(Config::kOffsetDs + (step % Config::kDsStages) * Config::kDsBytes);
    const uint32_t p_tile = sm.addr(Config::kOffsetP + (step % Config::kDsStages) * Config::kPBytes);

    // S^T = K Q_c^T, dP^T = V dO_c^T: every key, this warpgroup's rows (32 rows into the tile).
    float s[kSRegs], dp[kSRegs];
    sm.q_ring()->consumer_wait(st);
    sm90::wgmma_kk<Element, kRows, kHeadDim, true>(s, k_addr, kBlockN * 128, q_tile + c * kRows * 128, kBlockM * 128);
    sm.do_ring()->consumer_wait(st);
    sm90::wgmma_kk<Element, kRows, kHeadDim, true>(dp, v_addr, kBlockN * 128, do_tile + c * kRows * 128, kBlockM * 128);

    const uint32_t lse_addr = sm90::smem_u32(sm.lse(st.stage)) + c * kRows * 4;
    const uint32_t delta_addr = sm90::smem_u32(sm.delta(st.stage)) + c * kRows * 4;
    uint32_t p_frag[kRows / 16][4], ds_frag[kRows / 16][4];
    bwd_step_p_ds<Config>(s, dp, p_frag, ds_frag, th, args, p, blk, h, blk.key0, rows0, lse_addr, delta_addr);
    // P^T and dS^T: 64 keys x this warpgroup's 32 rows, columns 32c .. of the 64-row tiles.
    sm90::store_fragments_sw128<kRows>(p_tile, p_frag, th.warp, th.lane, c * kRows / 8);
    sm90::store_fragments_sw128<kRows>(ds_tile, ds_frag, th.warp, th.lane, c * kRows / 8);
    sm90::fence_async_shared();
    sm90::named_barrier_sync(kBwdDsBarrier, kBwdConsumerThreads);  // both halves written

    // dV_c += P^T dO[:, c], dK_c += dS^T Q[:, c] (A K-major: keys x rows), dQ_c = dS K[:, c]
    // (A = dS^T read transposed: rows x keys), in two 64-column slices.
    auto dq_slice = [&](float (&dq)[kAccRegs / 2], int slice) {
      sm90::wgmma_mm<Element, kCols / 2, kBlockN, true>(dq, ds_tile, kBlockN * 128,
                                                        k_addr + (first_block + slice * kCols / 128) * kBlockN * 128, kBlockN * 128);
    };
    auto release_stages = [&] {  // dV and dK done: the step's Q and dO stages are free
      sm90::fence_accumulators(dv);
      sm90::fence_accumulators(dk);
      sm.do_ring()->consumer_release(st);
      sm.q_ring()->consumer_release(st);
    };
    if constexpr (Config::kDqOverlap) {
      // Slice 0 first: its adds run while the tensor cores work on dV and dK, then slice 1.
      float dq[kAccRegs / 2];
      dq_slice(dq, 0);
      sm90::wgmma_km<Element, kCols, kBlockM>(dv, p_tile, 0, do_tile + first_block * kBlockM * 128, kBlockM * 128, step > 0);
      sm90::wgmma_km<Element, kCols, kBlockM>(dk, ds_tile, 0, q_tile + first_block * kBlockM * 128, kBlockM * 128, step > 0);
      sm90::wgmma_wait<2>();  // slice 0 (groups complete in order); dV and dK may still run
      sm90::fence_accumulators(dq);
      bwd_add_dq_wide<Config>(args, blk, h, row0, col0, 0, dq);
      dq_slice(dq, 1);
      sm90::wgmma_wait<1>();  // dV and dK
      release_stages();
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(dq);
      bwd_add_dq_wide<Config>(args, blk, h, row0, col0, 1, dq);
    } else {
      sm90::wgmma_km<Element, kCols, kBlockM>(dv, p_tile, 0, do_tile + first_block * kBlockM * 128, kBlockM * 128, step > 0);
      sm90::wgmma_km<Element, kCols, kBlockM>(dk, ds_tile, 0, q_tile + first_block * kBlockM * 128, kBlockM * 128, step > 0);
      // Each slice added as soon as it is done.
#pragma unroll
      for (int slice = 0; slice < 2; ++slice) {
        float dq[kAccRegs / 2];
        dq_slice(dq, slice);
        sm90::wgmma_wait<0>();
        sm90::fence_accumulators(dq);
        if (slice == 0) release_stages();
        bwd_add_dq_wide<Config>(args, blk, h, row0, col0, slice, dq);
      }
    }
  });
}

// The wide consumer warpgroup's whole part: the steps, then its columns of dK and dV.
template <typename Config>
__device__ __forceinline__ void bwd_consumer_wide(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm) {
  constexpr int kAccRegs = Config::kDqCols / 2;
  BwdThread th = BwdThread::of_consumer();
  th.key[0] = blk.key0 + 16 * th.warp + th.lane / 4;  // both warpgroups: all 64 keys
  th.key[1] = th.key[0] + 8;
  float dk[kAccRegs], dv[kAccRegs];  // started by the first step's wgmmas (see bwd_consumer)
  const bool any_step = blk.steps() > 0;
  if (any_step) bwd_consume_wide<Config>(args, blk, sm, dk, dv, th);
  bwd_epilogue<Config>(maps, args, blk, sm, th, 0, th.consumer * Config::kDqCols, dk, dv, any_step);
}

}  // namespace flashattn::fa3
