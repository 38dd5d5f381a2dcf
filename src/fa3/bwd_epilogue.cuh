// The FA3 backward's epilogue: a consumer warpgroup's dK and dV (fp32 accumulators: rows are keys,
// columns the head dim) out to global memory. Dense calls (BwdMaps::dkv_by_tma): both warpgroups
// stage the block's tiles in the K and V tiles' shared memory, which their last wgmmas have
// finished reading, and one thread stores them with TMA stores, asynchronous and in whole lines;
// varlen calls store from registers (a block's rows may reach into the next sequence's, which a
// map does not clip).
#pragma once

#include <cstdint>

#include "arch/sm80/mma.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"
#include "fa3/bwd_producer.cuh"
#include "fa3/bwd_step_math.cuh"

namespace flashattn::fa3 {

// Named barrier of the two consumer warpgroups around the staging of dK and dV.
inline constexpr uint32_t kBwdEpilogueBarrier = 7;

// dK's factor: plain scores leave the softmax scale out of dS, and dK takes it here.
template <typename Config>
__device__ __forceinline__ float bwd_dk_scale(const BwdArgs& args) {
  return Config::kGeneralScore ? 1.f : args.problem.fwd.score.scale;
}

// dK and dV of this thread's keys (th.key) and of its kRegs / 2 columns from col0, two elements
// per store, for every stored key of the block; keys past seqused_k or seen by no row get 0.
template <typename Config, int kRegs>
__device__ __forceinline__ void bwd_store_dk_dv_registers(const BwdArgs& args, const BwdBlock& blk, const BwdThread& th, int col0,
                                                          const float (&dk)[kRegs], const float (&dv)[kRegs], bool any_step) {
  using Element = typename Config::Element;
  const AttnProblem& p = args.problem.fwd;
  const float dk_scale = bwd_dk_scale<Config>(args);
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
    for (int i = 0; i < kRegs / 4; ++i) {
      const int col = col0 + 8 * i + 2 * th.quad;
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

// After both consumer warpgroups have staged their parts of dK and dV in the K and V tiles: one
// thread stores the tiles with TMA stores (column blocks of kBlockN rows x 64 columns).
template <typename Config>
__device__ __forceinline__ void bwd_store_dk_dv_tiles(const BwdMaps& maps, const BwdBlock& blk, const BwdSmem<Config>& sm) {
  constexpr int kTileBytes = Config::kBlockN * 128;
  const uint32_t dk_tile = sm.addr(0), dv_tile = sm.addr(Config::kOffsetV);
  sm90::fence_async_shared();
  sm90::named_barrier_sync(kBwdEpilogueBarrier, kBwdConsumerThreads);
  if (threadIdx.x == 128) {
#pragma unroll 1
    for (int c = 0; c < Config::kColumnBlocks; ++c) {
      sm90::tma_store_4d(&maps.dk, reinterpret_cast<const void*>(__cvta_shared_to_generic(dk_tile + c * kTileBytes)), 64 * c, blk.hk,
                         blk.key0, blk.b);
      sm90::tma_store_4d(&maps.dv, reinterpret_cast<const void*>(__cvta_shared_to_generic(dv_tile + c * kTileBytes)), 64 * c, blk.hk,
                         blk.key0, blk.b);
    }
    sm90::tma_store_commit();
    sm90::tma_store_wait_read();  // the shared memory stays the CTA's until the stores have read it
  }
}

// The TMA path: this warpgroup's accumulators (kRegs / 2 columns from col0, keys from row0 of the
// block) into the K (dK) and V (dV) tiles, which have the dk and dv maps' box layout: column
// blocks of kBlockN rows x 64 columns, 128-byte swizzled. Rows past the sequence (or past the
// head dim) are clipped by the maps; keys past seqused_k hold zero accumulators.
template <typename Config, int kRegs>
__device__ __forceinline__ void bwd_store_dk_dv_tma(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk,
                                                    const BwdSmem<Config>& sm, const BwdThread& th, int row0, int col0,
                                                    const float (&dk)[kRegs], const float (&dv)[kRegs], bool any_step) {
  using Element = typename Config::Element;
  constexpr int kTileBytes = Config::kBlockN * 128;  // one column block of the K or V tile
  constexpr int kOwnColumnBlocks = 2 * kRegs / 64;   // this warpgroup's share of the tiles
  constexpr auto kStores = sm90::SmemStores::Stmatrix;  // measured faster here (docs/PERF.md)
  const uint32_t at = uint32_t(row0 * 128 + (col0 / 64) * kTileBytes);
  const uint32_t dk_tile = sm.addr(0), dv_tile = sm.addr(Config::kOffsetV);
  // Every consumer warpgroup's last wgmma has read K and V.
  sm90::named_barrier_sync(kBwdEpilogueBarrier, kBwdConsumerThreads);
  if (any_step) {
    const float dk_scale = bwd_dk_scale<Config>(args);
    const float dk_scales[2] = {dk_scale, dk_scale}, dv_scales[2] = {1.f, 1.f};
    sm90::store_accumulators_sw128<Element, 2 * kRegs, !Config::kGeneralScore, kTileBytes, kStores>(dk_tile + at, dk, dk_scales, th.warp,
                                                                                                    th.lane);
    sm90::store_accumulators_sw128<Element, 2 * kRegs, false, kTileBytes, kStores>(dv_tile + at, dv, dv_scales, th.warp, th.lane);
  } else {
    // No steps: the accumulators were never written; the keys' gradients are 0.
    const int tid = int(threadIdx.x % 128);
#pragma unroll 1
    for (int i = tid * 16; i < kOwnColumnBlocks * 64 * 128; i += 128 * 16) {
      const uint32_t offset = at + uint32_t((i / (64 * 128)) * kTileBytes + i % (64 * 128));
      sm90::st_shared_zero16(dk_tile + offset);
      sm90::st_shared_zero16(dv_tile + offset);
    }
  }
  bwd_store_dk_dv_tiles<Config>(maps, blk, sm);
}

// Rows on M (bwd_consumer_rows.cuh): this warpgroup's dK^T and dV^T, columns col0 .. col0 + 127
// on the M side in two 64-column blocks t, the block's kBlockN keys on N (accumulator pair
// (4i + 2h, + 1): column 16 warp + lane / 4 + 8h of block t, keys 8i + 2 quad + {0, 1}). The TMA
// path stores them transposed (stmatrix .trans) into the K and V tiles, [keys][64 columns] per
// column block as the dk and dv maps' boxes; the register path writes single elements.
template <typename Config, int kRegs>
__device__ __forceinline__ void bwd_epilogue_transposed(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk,
                                                        const BwdSmem<Config>& sm, const BwdThread& th, int col0,
                                                        const float (&dk)[2][kRegs], const float (&dv)[2][kRegs], bool any_step) {
  using Element = typename Config::Element;
  constexpr int kBlockN = Config::kBlockN, kGroups = kBlockN / 8;
  static_assert(kRegs == kBlockN / 2, "accumulators of kBlockN keys");
  const float dk_scale = bwd_dk_scale<Config>(args);
  // (selects, not products: without steps dk and dv hold whatever their registers held)
  auto pair = [&](const float (&acc)[kRegs], int a, float scale) {
    return any_step ? sm80::pack2<Element>(acc[a] * scale, acc[a + 1] * scale) : 0u;
  };
  if (!maps.dkv_by_tma) {
    const AttnProblem& p = args.problem.fwd;
    const BwdProblem& bp = args.problem;
    Element* dk_out = static_cast<Element*>(bp.dk.data);
    Element* dv_out = static_cast<Element*>(bp.dv.data);
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = col0 + 64 * t + 16 * th.warp + th.lane / 4 + 8 * h;
          const uint32_t k_pair = pair(dk[t], 4 * i + 2 * h, dk_scale), v_pair = pair(dv[t], 4 * i + 2 * h, 1.f);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = blk.key0 + 8 * i + 2 * th.quad + e;
            if (key >= blk.stored_k) continue;
            if (col < p.head_dim)
              *reinterpret_cast<uint16_t*>(dk_out + bp.dk.offset(blk.b, key, blk.hk) + col) = uint16_t(k_pair >> (16 * e));
            if (col < p.head_dim_v)
              *reinterpret_cast<uint16_t*>(dv_out + bp.dv.offset(blk.b, key, blk.hk) + col) = uint16_t(v_pair >> (16 * e));
          }
        }
    return;
  }
  const uint32_t dk_tile = sm.addr(0), dv_tile = sm.addr(Config::kOffsetV);
  // Every consumer warpgroup's last wgmma has read K and V.
  sm90::named_barrier_sync(kBwdEpilogueBarrier, kBwdConsumerThreads);
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const uint32_t at = uint32_t((col0 / 64 + t) * kBlockN * 128);
    uint32_t pairs[2 * kGroups];
#pragma unroll
    for (int j = 0; j < kGroups * 2; ++j) pairs[j] = pair(dk[t], 2 * j, dk_scale);
    sm90::store_pairs_transposed_sw128<kGroups>(dk_tile + at, pairs, th.warp, th.lane);
#pragma unroll
    for (int j = 0; j < kGroups * 2; ++j) pairs[j] = pair(dv[t], 2 * j, 1.f);
    sm90::store_pairs_transposed_sw128<kGroups>(dv_tile + at, pairs, th.warp, th.lane);
  }
  bwd_store_dk_dv_tiles<Config>(maps, blk, sm);
}

// A consumer warpgroup's dK and dV out: keys from row0 of the block, kRegs / 2 columns from col0.
template <typename Config, int kRegs>
__device__ __forceinline__ void bwd_epilogue(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm,
                                             const BwdThread& th, int row0, int col0, const float (&dk)[kRegs], const float (&dv)[kRegs],
                                             bool any_step) {
  if (maps.dkv_by_tma) bwd_store_dk_dv_tma<Config>(maps, args, blk, sm, th, row0, col0, dk, dv, any_step);
  else bwd_store_dk_dv_registers<Config>(args, blk, th, col0, dk, dv, any_step);
}

}  // namespace flashattn::fa3
