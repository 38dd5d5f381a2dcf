// The FA3 backward's producer (one thread): K and V of the CTA's key block once, then per step Q
// with its rows' LSE into the Q ring and dO with its rows' D into the dO ring, all by TMA on the
// rings' mbarriers. Steps run heads outer, row blocks inner, as the consumers walk them.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "fa3/bwd_block.cuh"
#include "fa3/bwd_config.h"

namespace flashattn::fa3 {

template <typename Config>
struct BwdSmem {
  unsigned char* base;  // 1024-byte aligned
  __device__ __forceinline__ uint32_t addr(int offset) const { return uint32_t(__cvta_generic_to_shared(base)) + uint32_t(offset); }
  __device__ __forceinline__ uint64_t* kv_full() const { return reinterpret_cast<uint64_t*>(base + Config::kOffsetBarriers); }
  __device__ __forceinline__ sm90::Pipeline<Config::kStages>* q_ring() const {
    return reinterpret_cast<sm90::Pipeline<Config::kStages>*>(base + Config::kOffsetBarriers + 16);
  }
  __device__ __forceinline__ sm90::Pipeline<Config::kDoStages>* do_ring() const {
    return reinterpret_cast<sm90::Pipeline<Config::kDoStages>*>(q_ring() + 1);
  }
  // The CTA's coordinates (bwd_kernel), past the rings: written by one thread before the
  // kernel's first barrier, read by every role through 32-bit shared addresses.
  static_assert(16 + sizeof(sm90::Pipeline<Config::kStages>) + sizeof(sm90::Pipeline<Config::kDoStages>) <= 128 &&
                    128 + sizeof(BwdCoords) <= 256,
                "kv_full, the two rings and the coordinates within the 256 bytes of barriers");
  __device__ __forceinline__ void store_coords(const BwdCoords& c) const {
    const uint32_t at = addr(Config::kOffsetBarriers + 128);
    sm90::st_shared_s32(at, c.n);
    sm90::st_shared_s32(at + 4, c.hk);
    sm90::st_shared_s32(at + 8, c.b);
  }
  __device__ __forceinline__ BwdCoords coords() const {
    const uint32_t at = addr(Config::kOffsetBarriers + 128);
    return {sm90::ld_shared_s32(at), sm90::ld_shared_s32(at + 4), sm90::ld_shared_s32(at + 8)};
  }
  __device__ __forceinline__ float* lse(int stage) const {
    return reinterpret_cast<float*>(base + Config::kOffsetLse + stage * Config::kRowBytes);
  }
  __device__ __forceinline__ float* delta(int stage) const {
    return reinterpret_cast<float*>(base + Config::kOffsetDelta + stage * Config::kRowBytes);
  }
  __device__ __forceinline__ void* at(int offset) const { return base + offset; }
};


template <typename Config>
__device__ __forceinline__ void bwd_produce(const BwdMaps& maps, const BwdArgs& args, const BwdBlock& blk, const BwdSmem<Config>& sm) {
  using State = sm90::PipelineState<Config::kStages>;
  using DoState = sm90::PipelineState<Config::kDoStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kColumnBlocks = Config::kColumnBlocks;
  const AttnProblem& p = args.problem.fwd;
  // Varlen: the maps span all rows (batch extent 1); sequence b starts at row cu_seqlens[b].
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  const int q_first = varlen ? p.lens.cu_seqlens_q[blk.b] : 0;
  const int k_first = varlen ? p.lens.cu_seqlens_k[blk.b] : 0;
  const int batch_coord = varlen ? 0 : blk.b;
  // A box partly out of bounds still completes its full byte count (zero-filled).
  sm90::mbarrier_arrive_expect_tx(sm.kv_full(), 2 * Config::kKBytes);
  for (int c = 0; c < kColumnBlocks; ++c) {
    sm90::tma_load_4d(sm.at(c * kBlockN * 128), &maps.k, 64 * c, blk.hk, k_first + blk.key0, batch_coord, sm.kv_full());
    sm90::tma_load_4d(sm.at(Config::kOffsetV + c * kBlockN * 128), &maps.v, 64 * c, blk.hk, k_first + blk.key0, batch_coord,
                      sm.kv_full());
  }
  // (the row statistics' addresses are formed per step, not held per head)
  bwd_for_each_step(blk, [&](uint32_t step, int, int h, int m) {
    const State st = State::at(step);
    const int row0 = m * kBlockM;
    const int64_t rows = (int64_t(blk.b) * p.heads_q + h) * args.rows_padded + row0;
    uint64_t* q_full = &sm.q_ring()->full[st.stage];
    sm.q_ring()->producer_acquire(st, Config::kQBytes + Config::kRowBytes);
    for (int c = 0; c < kColumnBlocks; ++c)
      sm90::tma_load_4d(sm.at(Config::kOffsetQ + st.stage * Config::kQBytes + c * kBlockM * 128), &maps.q, 64 * c, h,
                            q_first + row0, batch_coord, q_full);
    sm90::bulk_load(sm.lse(st.stage), args.lse_log2 + rows, Config::kRowBytes, q_full);
    const DoState dst = DoState::at(step);
    uint64_t* do_full = &sm.do_ring()->full[dst.stage];
    sm.do_ring()->producer_acquire(dst, Config::kQBytes + Config::kRowBytes);
    for (int c = 0; c < kColumnBlocks; ++c)
      sm90::tma_load_4d(sm.at(Config::kOffsetDo + dst.stage * Config::kQBytes + c * kBlockM * 128), &maps.dout, 64 * c, h,
                            q_first + row0, batch_coord, do_full);
    sm90::bulk_load(sm.delta(dst.stage), args.delta + rows, Config::kRowBytes, do_full);
  });
}

}  // namespace flashattn::fa3
