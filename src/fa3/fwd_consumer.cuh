// The FA3 forward's consumer warpgroups: for each work tile the producer publishes, S = Q K^T
// (wgmma, both operands in shared memory, K-major), the masked online softmax in registers
// (fwd_softmax.cuh), O += P V with P as the register A operand and V MN-major, intra-warpgroup
// overlap of the softmax with the GEMMs and ping-pong between the warpgroups; then the epilogue
// (fwd_epilogue.cuh).
// fp8 (Config::kFp8): S = Q K^T on e4m3 wgmmas (k32 steps), the scale times q_descale k_descale of
// the tile's (sequence, kv head), P shifted by 2^kPShift and packed to e4m3 A fragments
// (arch/sm90/fp8.cuh), and O += P Vt with Vt the transposing warps' K-major ring.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/fp8.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "arch/sm90/wgmma_fp8_ops.cuh"
#include "common/mask.h"
#include "common/problem.h"
#include "common/score.h"
#include "fa3/fp8_descale.cuh"
#include "fa3/fwd_config.h"
#include "fa3/fwd_epilogue.cuh"
#include "fa3/fwd_gemms.cuh"
#include "fa3/fwd_scheduler.cuh"
#include "fa3/fwd_smem.cuh"
#include "fa3/fwd_softmax.cuh"
#include "fa3/fwd_turns.cuh"

namespace flashattn::fa3 {

template <typename Config>
__device__ __forceinline__ void fwd_consume(const FwdMaps& maps, const AttnProblem& p, const FwdGrid& grid, const FwdSmem<Config>& sm) {
  using Element = typename Config::Element;
  using State = sm90::PipelineState<Config::kStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  constexpr int kColumnBlocksV = Config::kColumnBlocksV;
  constexpr int kHeadDimV = Config::kHeadDimV;
  auto* pipeline_k = sm.pipeline_k;
  // The ring P V reads: V (16-bit) or V transposed (fp8).
  auto* pipeline_v = Config::kFp8 ? sm.pipeline_vt : sm.pipeline_v;
  uint64_t* q_full = sm.q_full;
  uint64_t* q_empty = sm.q_empty;
  auto tile_slot = [&](uint32_t n) { return sm.tile_slot(n); };
  // The warpgroup and the work tile as uniform values (sm90::warp_uniform), hence the tile
  // addresses and wgmma descriptors. The general score path keeps them per thread (made uniform,
  // its kernels spill).
  const auto uniform = [](int x) { return Config::kGeneralScore ? x : sm90::warp_uniform(x); };
  const int warpgroup = uniform(int(threadIdx.x / 128));
  const int consumer = warpgroup - 1;  // rows consumer * 64 .. + 63 of the block
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  // Named barriers: the clear of a stage's V tail (all consumer threads), the ping-pong turns
  // (fwd_turns.cuh), and kEpilogueBarrier: every consumer's last P V done (O's staging area is in
  // the V ring: P V read it, or fp8: the transposing warps read it before P V could start), then
  // O staged.
  constexpr uint32_t kConsumerThreads = 128 * Config::kConsumers, kClearBarrier = kFwdClearBarrier;
  constexpr int kSRegs = kBlockN / 2, kORegs = kHeadDimV / 2;
  const float scale_log2 = Config::kGeneralScore ? kLog2e : p.score.scale * kLog2e;
  const uint32_t v_addr = sm90::smem_u32(sm.v);
  const FwdGemms<Config> gemms{sm90::smem_u32(sm.q) + consumer * 64 * Config::kQKSwizzle,  // this warpgroup's 64 rows
                               sm90::smem_u32(sm.k), Config::kFp8 ? sm90::smem_u32(sm.vt) : v_addr};
  const FwdTurns<Config> turns{consumer};
  // A warp's arrival on a stage's empty barrier, once all its lanes are past their wait.
  auto release = [&](uint64_t* empty) {
    __syncwarp();
    if (lane == 0) sm90::mbarrier_arrive(empty);
  };
  // Every thread's arrival on Q empty (it read the tile slot; see q_empty's init). The __syncwarp
  // is not needed for the barrier: without it ptxas allocates the consumers' registers otherwise
  // and 16 configurations spill.
  auto release_q = [&]() {
    __syncwarp();
    sm90::mbarrier_arrive(q_empty);
  };
  uint32_t done = 0, uses = 0;  // unsigned: wrapping keeps stage and parity right

  for (;;) {
    sm90::mbarrier_wait(q_full, done & 1u);
    const int w = uniform(sm90::ld_shared_s32(tile_slot(done)));  // (and so the ring stages)
    if (w < 0) break;  // (the O stores' reads of shared memory are done: their global writes complete with the grid)
    const WorkTile wt = work_tile<kBlockM, kBlockN>(p, grid, w);
    const int b = wt.b, h = wt.h;
    const int sq = wt.sq, sk = wt.sk, tile_begin = wt.tile_begin, tile_end = wt.tile_end;
    const int wg_row0 = wt.row0 + consumer * 64;  // this thread's rows: + 16 warp + group, + 8
    const AccumulatorCoords at{wg_row0 + warp * 16 + lane / 4, lane % 4};
    // The key tiles that need no mask for this warpgroup's 64 rows, found once per work tile: the
    // loop tests a tile with two compares.
    const TileSpan unmasked = fully_visible_tiles_32(p.mask, wg_row0, wg_row0 + 64, kBlockN, sq, sk);
    // fp8: q_descale k_descale of the tile's (sequence, kv head) folds into the softmax scale.
    const float qk_descale = [&] {
      if constexpr (Config::kFp8) return qk_descale_of(p, b, h);
      else return 1.f;
    }();
    // Plain scores take the row max of the raw scores, right only for a scale >= 0: a negative
    // descale product makes the tile's outputs NaN rather than wrong (the general-score logit
    // stage scales first and takes any sign).
    const float tile_scale_log2 = [&] {
      if constexpr (Config::kFp8) {
        const float c = p.score.scale * qk_descale * kLog2e;
        return Config::kGeneralScore ? kLog2e : c >= 0.f ? c : NAN;
      } else {
        return scale_log2;
      }
    }();

    float o[kORegs];
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
    float s[kSRegs];
    uint32_t p_frag[kBlockN / (Config::kFp8 ? 32 : 16)][4];  // P as the A operand of P V
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, rescale[2];

    // P of the tile just done in softmax, packed into the A fragments the next P V reads.
    auto write_p = [&]() {
      if constexpr (Config::kFp8) {
        sm90::pack_fragments_e4m3(p_frag, s);
      } else {
        sm90::pack_fragments<Element>(p_frag, s);
      }
    };
    // Keys past this sequence's end inside its last tile: with varlen (the next sequence's rows) or
    // seqused_k (rows the caller did not fill) they are in bounds of the map, so the TMA loads real
    // memory there. P is 0 for them, but 0 * NaN is NaN: the consumers clear those V rows (each
    // 128-byte row of each column block; the swizzle permutes chunks within a row) before the stage
    // is used. Dense without seqused_k needs nothing: the rows are out of bounds and zero-filled.
    // (fp8: the transposing warps write those keys of Vt as zeros.)
    auto clear_v_tail = [&](int stage, int tile) {
      if constexpr (Config::kFp8) return;
      const bool clear_tails = p.lens.cu_seqlens_k != nullptr || p.lens.seqused_k != nullptr;
      const int first = sk - tile * kBlockN;  // first row of the stage past the sequence
      if (!clear_tails || first >= kBlockN) return;
      const uint32_t v = sm90::opaque_u32(v_addr + stage * Config::kVBytes) + first * 128;
      const int bytes = (kBlockN - first) * 128;  // per column block, contiguous from row `first`
#pragma unroll 1
      for (int i = (int(threadIdx.x) - 128) * 16; i < kColumnBlocksV * bytes; i += int(kConsumerThreads) * 16) {
        const int c = i / bytes;
        sm90::st_shared_zero16(v + c * (kBlockN * 128) + (i - c * bytes));
      }
      sm90::fence_async_shared();  // the generic-proxy stores, before wgmma reads the stage
      sm90::named_barrier_sync(kClearBarrier, kConsumerThreads);
    };

    // Logits, mask and online softmax of a tile's S, then `wait_pv` (the P V wgmmas in flight: in
    // the loop, those of the previous tile). 16-bit: two copies, masked and not, behind a uniform
    // branch: with the mask test inside a single copy the compiler predicated the per-element
    // compares into every tile (fp8 takes one copy: its two-copy form spills the widest tiles).
    // Unmasked tiles order the softmax before the P V wait (ptxas hoists it). With plain scores
    // (16-bit) a masked tile waits for them first, so that the mask's registers can reuse P's
    // (else 192 x 128 tiles at d64 and 128 x 176 at d128 spill); the test then covers the
    // warpgroup's 64 rows, since a wgmma wait inside the branch must be uniform over the
    // warpgroup. A masked tile is one that a diagonal, a window edge or the last key crosses; the
    // other warpgroups' GEMMs still run during its wait. General scores (whose logit stage keeps
    // more values live) mask before a single wait after the branch, per warp of 16 rows: ptxas
    // allocates that without spills.
    auto softmax_tile = [&](int tile, auto wait_pv) {
      const int key0 = tile * kBlockN;
      if constexpr (Config::kFp8)
        scores_to_logits<Config::kGeneralScore>(s, ScoreParams{p.score.scale * qk_descale, p.score.softcap}, p, at, key0, b, h, sq, sk);
      else
        scores_to_logits<Config::kGeneralScore>(s, p.score, p, at, key0, b, h, sq, sk);
      if constexpr (Config::kNoKeyLimits) {
        // Calls without causal or window limits only (Fp8FwdConfig::kNoKeyLimits): the mask of
        // the last tile's tail keeps few values live, so it needs no P V wait first (the interval
        // mask below is slower there: docs/PERF.md).
        if (key0 + kBlockN > sk) mask_keys_past_end(s, at, key0, sk);
        softmax_update<Config::kPShift, Config::kRescaleSlack>(s, row_max, row_sum, tile_scale_log2, rescale);
        sm90::fence_accumulators(s);  // as below
        wait_pv();
      } else if constexpr (!Config::kGeneralScore && Config::kOneSoftmaxCopy) {
        // fp8: one copy, the mask under a uniform branch before the softmax; its two-copy form
        // spills the widest tiles (128 x 224, 192 x 160, d256 128 x 128).
        if (!unmasked.contains(tile)) mask_scores<true>(s, p.mask, at, key0, sq, sk);
        softmax_update<Config::kPShift, Config::kRescaleSlack>(s, row_max, row_sum, tile_scale_log2, rescale);
        sm90::fence_accumulators(s);  // as below
        wait_pv();
      } else if constexpr (!Config::kGeneralScore) {
        if (unmasked.contains(tile)) {
          softmax_update<Config::kPShift, Config::kRescaleSlack>(s, row_max, row_sum, tile_scale_log2, rescale);
          // Orders the softmax before the wait in the source. ptxas still issues the wait first in
          // every plain-score kernel (as in FA3's); forcing the order measured slower (docs/PERF.md,
          // twentieth and thirtieth sessions).
          sm90::fence_accumulators(s);
          wait_pv();
        } else {
          wait_pv();
          mask_scores<true>(s, p.mask, at, key0, sq, sk);
          softmax_update<Config::kPShift, Config::kRescaleSlack>(s, row_max, row_sum, tile_scale_log2, rescale);
        }
      } else {
        const int warp_row0 = wg_row0 + 16 * warp;
        if (tile_fully_visible(p.mask, warp_row0, warp_row0 + 16, key0, key0 + kBlockN, sq, sk)) {
          softmax_update<Config::kPShift, Config::kRescaleSlack>(s, row_max, row_sum, tile_scale_log2, rescale);
        } else {
          mask_scores<false>(s, p.mask, at, key0, sq, sk);
          softmax_update<Config::kPShift, Config::kRescaleSlack>(s, row_max, row_sum, tile_scale_log2, rescale);
        }
        sm90::fence_accumulators(s);  // as above
        wait_pv();
      }
    };

    if (tile_begin < tile_end) {
      turns.open();
      // Intra-warpgroup overlap as written: while the P V wgmmas of tile n - 1 run, the softmax of
      // tile n (whose S wgmmas were issued first) runs on the other units (ptxas hoists the P V wait
      // of plain-score tiles, see softmax_tile; the overlap then comes from the other warpgroups). O
      // is rescaled after its wgmmas finish.
      // Ring states: K's from the counter (use uses + i for i = tile - tile_begin), V's carried over as
      // the state K had one tile before (use uses + i - 1).
      const State first = State::at(uses);
      State v_state = first;  // V of tile n - 1 is in the stage K of tile n - 1 used
      pipeline_k->consumer_wait(first);
      turns.begin();
      gemms.issue_qk(s, first.stage);
      turns.end(false);
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(s);
      release(&pipeline_k->empty[first.stage]);
      softmax_tile(tile_begin, [] {});  // no P V yet; O is still 0: its rescale is moot
      write_p();
      for (int tile = tile_begin + 1; tile < tile_end; ++tile) {
        const State k_state = State::at(uses + uint32_t(tile - tile_begin));
        pipeline_k->consumer_wait(k_state);
        pipeline_v->consumer_wait(v_state);
        // (No V tail to clear: only the last tile, tile_end - 1, can hold keys past sk.)
        turns.begin();
        gemms.issue_qk(s, k_state.stage);
        gemms.issue_pv(o, p_frag, v_state.stage);
        turns.end(false);
        sm90::wgmma_wait<1>();  // S of this tile; the P V group may still run
        sm90::fence_accumulators(s);
        release(&pipeline_k->empty[k_state.stage]);
        softmax_tile(tile, [&] {
          sm90::wgmma_wait<0>();
          sm90::fence_accumulators(o);
        });
        release(&pipeline_v->empty[v_state.stage]);
        rescale_rows<(Config::kRescaleSlack > 0.f)>(o, rescale);
        write_p();
        v_state = k_state;
      }
      // Every S is done: the producer may load the next tile's Q during the last P V and the epilogue.
      release_q();
      pipeline_v->consumer_wait(v_state);
      clear_v_tail(v_state.stage, tile_end - 1);
      turns.begin();
      gemms.issue_pv(o, p_frag, v_state.stage);
      turns.end(true);
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(o);
      release(&pipeline_v->empty[v_state.stage]);
      uses += uint32_t(tile_end - tile_begin);
    } else {
      release_q();
    }
    ++done;

    fwd_epilogue<Config>(maps, p, grid, sm, done, o, row_max, row_sum, at, sq, consumer, warp, lane, v_addr);
  }
}

}  // namespace flashattn::fa3
