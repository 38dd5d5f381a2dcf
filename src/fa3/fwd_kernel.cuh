// FlashAttention-3 forward (sm90a): TMA loads on an mbarrier pipeline, wgmma, warp specialisation,
// intra-warpgroup overlap of softmax with the GEMMs and ping-pong between the consumer warpgroups.
// Persistent: one CTA per SM walks the work tiles, in a static or dynamic order (fwd_scheduler.cuh).
//
// CTA = 1 + kConsumers warpgroups: warpgroup 0 is the producer (one thread issues the TMA loads of
// Q per work tile and K, V per key tile into kStages rings); warpgroups 1.. are consumers, 64 query
// rows each (kBlockM = 64 kConsumers). Shared memory holds every tile as 64-element (128-byte)
// column blocks in the 128-byte swizzle the TMA writes: Q [d/64][kBlockM rows][64], K and V [stage][d/64][kBlockN][64].
// A consumer computes S = Q K^T (wgmma, both operands in shared memory, K-major), the masked online
// softmax in registers, then O += P V with P as the register A operand (or, FwdConfig::kPInSmem,
// from shared memory) and V MN-major. The epilogue stages O in shared memory for a TMA store
// (FwdMaps::o_by_tma), or stores it from registers.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "arch/sm80/math.cuh"
#include "arch/sm80/mma.cuh"
#include "arch/sm90/accumulator_smem.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "common/mask.h"
#include "common/problem.h"
#include "common/score.h"
#include "fa3/fwd_scheduler.cuh"
#include "fa3/fwd_softmax.cuh"

namespace flashattn::fa3 {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockN_, int kStages_, bool kGeneralScore_, bool kPingPong_,
          int kConsumers_ = 2, bool kPInSmem_ = false>
struct FwdConfig {
  // P V takes P from shared memory (each consumer warpgroup's own 64 x kBlockN tile, K-major in
  // the 128-byte swizzle) instead of registers: the P fragments no longer hold registers through
  // the next tile's S, which lets three consumer warpgroups (160 registers) run 192 x 192 at d64
  // (FA3's unmasked d64 tile).
  static constexpr bool kPInSmem = kPInSmem_;
  // The consumer warpgroups take turns issuing their wgmmas (see the consumer loop).
  static constexpr bool kPingPong = kPingPong_;
  // Consumer warpgroups of 64 rows each: 2, or 3 for d64 (FA3's 192-row tile: at d64 the GEMMs
  // are short, and a third warpgroup keeps the tensor cores fed while two do their softmax).
  static constexpr int kConsumers = kConsumers_;
  // setmaxnreg split of the 64K registers: producer 24 + 2 x 240, or 32 + 3 x 160.
  static constexpr int kProducerRegisters = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 160;
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  using Element = Element_;
  // Not AttnProblem::plain_forward_scores() (softcap, ALiBi or scale <= 0): the logit stage runs per
  // element (fwd_softmax.cuh); else the scale is folded into exp2 and full tiles run straight-line code.
  static constexpr bool kGeneralScore = kGeneralScore_;
  // Head dims of q/k and of v as the kernel computes them: multiples of 64. A call's smaller head dim
  // runs in the next one up; the TMA zero-fills the columns past the tensor's, and O is written only
  // up to head_dim_v.
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kColumnBlocks = kHeadDim / 64, kColumnBlocksV = kHeadDimV / 64;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKBytes = kBlockN * kHeadDim * 2;   // one stage
  static constexpr int kVBytes = kBlockN * kHeadDimV * 2;  // one stage
  static constexpr int kPBytes = kPInSmem ? 64 * kBlockN * 2 : 0;  // per consumer warpgroup
  // O staged for the TMA store, [column block of v][kBlockM rows][64]: the last kOBytes of the
  // V ring (as FA3 does: no room for a buffer of its own at d128 x 176 or d256), which is free
  // once every warpgroup's last P V is done; the producer loads the next tile's V only after the
  // store has read it.
  static constexpr int kOBytes = kBlockM * kHeadDimV * 2;
  // Q, then the K and V rings, the P tiles, then the barriers; every tile 1024-byte aligned for the swizzle.
  static constexpr int kSmemBytes =
      kQBytes + kStages * (kKBytes + kVBytes) + kConsumers * kPBytes + 1024 /*barriers*/ + 1024 /*alignment*/;
  static_assert(kHeadDim % 64 == 0 && kHeadDimV % 64 == 0 && kBlockN % 16 == 0, "tile shape");
  static_assert(!kPInSmem || kBlockN % 64 == 0, "P in shared memory: 64-key column blocks");
  static_assert(kOBytes <= kStages * kVBytes && (kStages * kVBytes - kOBytes) % 1024 == 0, "O staged in the V ring");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm90 CTA");
};

// The tensor maps of one call: 4-D (head_dim, heads, seqlen, batch), innermost first; the box is
// 64 head-dim elements x 1 head x rows x 1 sequence.
// o_by_tma: the epilogue stores O through `o` (dense calls whose out the TMA can address), else
// from registers (varlen: a box past a sequence's end would write the next sequence's rows).
struct FwdMaps {
  CUtensorMap q, k, v, o;
  int o_by_tma;
};

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdMaps maps, const AttnProblem p, const FwdGrid grid) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Config::Element;
  using State = sm90::PipelineState<Config::kStages>;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kStages = Config::kStages;
  constexpr int kColumnBlocks = Config::kColumnBlocks, kColumnBlocksV = Config::kColumnBlocksV;
  constexpr int kHeadDim = Config::kHeadDim, kHeadDimV = Config::kHeadDimV;
  // Each consumer warp releases a stage (after its wgmma wait, so all its lanes are done with it).
  constexpr uint32_t kConsumerWarps = 4 * Config::kConsumers;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Element* smem_q = reinterpret_cast<Element*>(smem);
  Element* smem_k = reinterpret_cast<Element*>(smem + Config::kQBytes);
  Element* smem_v = reinterpret_cast<Element*>(smem + Config::kQBytes + kStages * Config::kKBytes);
  // K and V have separate pipelines: a K stage is released as soon as S = Q K^T is done, so the next
  // K load overlaps the softmax; V is released after P V. Sharing one barrier per (K, V) stage
  // would hold K until P V finishes and leave the next load exposed.
  unsigned char* smem_p = smem + Config::kQBytes + kStages * (Config::kKBytes + Config::kVBytes);  // kPInSmem
  auto* pipeline_k = reinterpret_cast<sm90::Pipeline<kStages>*>(smem_p + Config::kConsumers * Config::kPBytes);
  auto* pipeline_v = pipeline_k + 1;
  // Q of the current work tile: full when loaded, empty when every consumer's last S is done.
  uint64_t* q_full = reinterpret_cast<uint64_t*>(pipeline_v + 1);
  uint64_t* q_empty = q_full + 1;
  // O of the previous work tile read by its TMA stores: the next tile's V may overwrite the
  // staging area.
  uint64_t* o_empty = q_empty + 1;
  // The work tiles the producer picked for the consumers, -1 when none is left (fwd_scheduler.cuh),
  // the CTA's n-th tile in slot n % 2: the consumers read a tile's slot again for its epilogue
  // (cheaper than keeping the tile in a register through the loop), and the producer writes that
  // slot again only for tile n + 2, after Q of tile n + 1 was released. The mbarrier arrive
  // (release) and wait (acquire) order the accesses. Static shared memory: a constant address.
  __shared__ int tile_slots[2];
  auto tile_slot = [&](uint32_t n) { return sm90::smem_u32(&tile_slots[n & 1u]); };
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    pipeline_k->init(kConsumerWarps);
    pipeline_v->init(kConsumerWarps);
    sm90::mbarrier_init(q_full, 1);
    // Every consumer thread arrives on Q empty (not one per warp): each reader of the tile slot
    // releases it itself, and the producer rewrites the slot only after that barrier.
    sm90::mbarrier_init(q_empty, 128 * Config::kConsumers);
    sm90::mbarrier_init(o_empty, 1);
    sm90::fence_barrier_init();
  }
  __syncthreads();

  // The producer picks the work tiles and publishes each in a tile slot with Q; `done` counts this
  // CTA's tiles (the phase of the Q barriers) and `uses` the K/V ring uses before the current tile
  // (each key tile is one K and one V).
  if (warpgroup == 0) {  // ---------------------------------------------------------- producer
    sm90::warpgroup_registers_decrease<Config::kProducerRegisters>();
    if (threadIdx.x == 0) {
      // Varlen: the maps span all rows (batch extent 1); sequence b starts at row cu_seqlens[b].
      const bool varlen = p.lens.cu_seqlens_q != nullptr;
      uint32_t done = 0, uses = 0;  // as the consumers count them
      for (int n = blockIdx.x;; n = next_work_tile(grid, n)) {  // n: position in the order
        // Slot done % 2 is free once every consumer thread has released the previous tile's Q: its
        // last reader was the epilogue of the tile before that one.
        if (n >= grid.work_tiles) {  // no tile left: the consumers read -1
          sm90::mbarrier_wait(q_empty, (done & 1u) ^ 1u);
          sm90::st_shared_s32(tile_slot(done), -1);
          sm90::mbarrier_arrive(q_full);
          break;
        }
        const int w = grid.section_shift > 0 ? scheduled_tile(grid, n) : n;
        const WorkTile wt = work_tile<kBlockM, kBlockN>(p, grid, w);
        if (!wt.valid) continue;
        sm90::mbarrier_wait(q_empty, (done & 1u) ^ 1u);
        // The previous tile's O staged in the V ring must have been read by its stores before this
        // tile's first V load (below). Every phase of that barrier is waited, a tile without keys
        // included (compute-sanitizer synccheck: "missing wait"); for such a tile the wait comes
        // before it is published, or its own epilogue could complete the next phase first.
        const bool o_staging_busy = maps.o_by_tma && done > 0;
        if (o_staging_busy && wt.tile_begin == wt.tile_end) sm90::mbarrier_wait(o_empty, (done - 1) & 1u);
        sm90::st_shared_s32(tile_slot(done), w);
        const int q_first = varlen ? p.lens.cu_seqlens_q[wt.b] : 0;
        const int k_first = varlen ? p.lens.cu_seqlens_k[wt.b] : 0;
        const int batch_coord = varlen ? 0 : int(wt.b);
        const int hk = wt.h / (int(p.heads_q) / int(p.heads_k));  // kv_head in 32 bits: no 64-bit division call
        // A box partly out of bounds (last Q block, last K/V tile) still completes its full byte
        // count (zero-filled), so the expect-tx counts are constants (verified on the H200).
        sm90::mbarrier_arrive_expect_tx(q_full, Config::kQBytes);
        for (int c = 0; c < kColumnBlocks; ++c)
          sm90::tma_load_4d(smem_q + c * kBlockM * 64, &maps.q, 64 * c, int(wt.h), q_first + wt.row0, batch_coord, q_full);
        // The consumers need K of tile n + 1 before V of tile n (they issue S_{n+1} then P_n V_n),
        // so V trails K by one tile: K0, K1, V0, K2, V1, ...
        auto load_tile = [&](sm90::Pipeline<kStages>* pipe, Element* ring, const CUtensorMap* map, int column_blocks, int tile) {
          const State st = State::at(uses + uint32_t(tile - wt.tile_begin));
          const int bytes = column_blocks * kBlockN * 128;
          pipe->producer_acquire(st, bytes);
          Element* dst = ring + st.stage * (bytes / 2);
          for (int c = 0; c < column_blocks; ++c)
            sm90::tma_load_4d(dst + c * kBlockN * 64, map, 64 * c, hk, k_first + tile * kBlockN, batch_coord, &pipe->full[st.stage]);
        };
        if (wt.tile_begin < wt.tile_end) load_tile(pipeline_k, smem_k, &maps.k, kColumnBlocks, wt.tile_begin);
        for (int tile = wt.tile_begin; tile < wt.tile_end; ++tile) {
          if (tile + 1 < wt.tile_end) load_tile(pipeline_k, smem_k, &maps.k, kColumnBlocks, tile + 1);
          // (The barrier is at most one phase behind: the Q-empty wait above came after the
          // arrival of the epilogue before the previous one, and this tile's epilogue needs this V.)
          if (tile == wt.tile_begin && o_staging_busy) sm90::mbarrier_wait(o_empty, (done - 1) & 1u);
          load_tile(pipeline_v, smem_v, &maps.v, kColumnBlocksV, tile);
        }
        uses += uint32_t(wt.tile_end - wt.tile_begin);
        ++done;
      }
    }
    return;
  }

  // -------------------------------------------------------------------------------- consumers
  sm90::warpgroup_registers_increase<Config::kConsumerRegisters>();
  const int consumer = warpgroup - 1;  // rows consumer * 64 .. + 63 of the block
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  // Named barriers: the clear of a stage's V tail (all consumer threads) and the ping-pong turns
  // (kTurnBarrier + c: consumer c's turn; two warpgroups meet at each).
  // kPBarrier + c: consumer c's P tile written (its 128 threads; P in shared memory only).
  // kEpilogueBarrier: every consumer's last P V done (O's staging area is in the V ring), then
  // O staged.
  constexpr uint32_t kConsumerThreads = 128 * Config::kConsumers, kClearBarrier = 1, kTurnBarrier = 2, kPBarrier = 5,
                     kEpilogueBarrier = 8;
  constexpr int kSRegs = kBlockN / 2, kORegs = kHeadDimV / 2;
  const float scale_log2 = Config::kGeneralScore ? kLog2e : p.score.scale * kLog2e;
  const uint32_t q_addr = sm90::smem_u32(smem_q) + consumer * 64 * 128;  // this warpgroup's 64 rows
  const uint32_t k_addr = sm90::smem_u32(smem_k), v_addr = sm90::smem_u32(smem_v);
  const uint32_t p_addr = sm90::smem_u32(smem_p) + consumer * Config::kPBytes;  // this warpgroup's P tile
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
    const int w = sm90::ld_shared_s32(tile_slot(done));
    if (w < 0) break;  // (the O stores' reads of shared memory are done: their global writes complete with the grid)
    const WorkTile wt = work_tile<kBlockM, kBlockN>(p, grid, w);
    const int b = wt.b, h = wt.h;
    const int sq = wt.sq, sk = wt.sk, tile_begin = wt.tile_begin, tile_end = wt.tile_end;
    const int wg_row0 = wt.row0 + consumer * 64;  // this thread's rows: + 16 warp + group, + 8
    const AccumulatorCoords at{wg_row0 + warp * 16 + lane / 4, lane % 4};

    float o[kORegs];
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
    float s[kSRegs];
    uint32_t p_frag[Config::kPInSmem ? 1 : kBlockN / 16][4];  // P as registers (not kPInSmem)
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, rescale[2];

    // S = Q K^T: k16 step j reads column block j / 4 at byte offset 32 * (j % 4).
    auto issue_qk = [&](int stage) {
      const uint32_t q_base = sm90::opaque_u32(q_addr), k_base = sm90::opaque_u32(k_addr + stage * Config::kKBytes);
      sm90::wgmma_fence();
#pragma unroll
      for (int j = 0; j < kHeadDim / 16; ++j) {
        const uint32_t q_step = q_base + (j / 4) * kBlockM * 128 + (j % 4) * 32;
        const uint32_t k_step = k_base + (j / 4) * kBlockN * 128 + (j % 4) * 32;
        sm90::Wgmma<Element, kBlockN>::template ss<0>(s, sm90::kmajor_descriptor_at(q_step), sm90::kmajor_descriptor_at(k_step),
                                                      j > 0);
      }
      sm90::wgmma_commit();
    };
    // O += P V: V's k16 step kk starts at key row 16kk (2048 bytes into each column block), column
    // blocks kBlockN * 128 bytes apart (MN-major).
    // With P in shared memory its k16 step kk reads column block kk / 4 at byte offset 32 * (kk % 4).
    auto issue_pv = [&](int stage) {
      const uint32_t v_base = sm90::opaque_u32(v_addr + stage * Config::kVBytes);
      sm90::wgmma_fence();
      if constexpr (Config::kPInSmem) {
        const uint32_t p_base = sm90::opaque_u32(p_addr);
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
          sm90::Wgmma<Element, kHeadDimV>::template ss<1>(
              o, sm90::kmajor_descriptor_at(p_base + (kk / 4) * 64 * 128 + (kk % 4) * 32),
              sm90::mnmajor_descriptor_at(v_base + kk * 2048, kBlockN * 128), 1);
      } else {
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
          sm90::Wgmma<Element, kHeadDimV>::template rs<1>(o, p_frag[kk], sm90::mnmajor_descriptor_at(v_base + kk * 2048, kBlockN * 128),
                                                          1);
      }
      sm90::wgmma_commit();
    };
    // P of the tile just done in softmax, as the next P V reads it: from registers (packed A
    // fragments) or written to this warpgroup's P tile. The previous P V has finished reading the
    // tile (its wait is in softmax_tile); the barrier makes every warp's stores, fenced for the
    // async proxy, visible to the warpgroup's next wgmma.
    auto write_p = [&]() {
      if constexpr (Config::kPInSmem) {
        constexpr float kUnscaled[2] = {1.f, 1.f};
        sm90::store_accumulators_sw128<Element, kBlockN, false>(p_addr, s, kUnscaled, warp, lane);
        sm90::fence_async_shared();
        sm90::named_barrier_sync_of<kPBarrier, 128>(consumer);
      } else {
        sm90::pack_fragments<Element>(p_frag, s);
      }
    };
    // Keys past this sequence's end inside its last tile: with varlen (the next sequence's rows) or
    // seqused_k (rows the caller did not fill) they are in bounds of the map, so the TMA loads real
    // memory there. P is 0 for them, but 0 * NaN is NaN: the consumers clear those V rows (each
    // 128-byte row of each column block; the swizzle permutes chunks within a row) before the stage
    // is used. Dense without seqused_k needs nothing: the rows are out of bounds and zero-filled.
    auto clear_v_tail = [&](int stage, int tile) {
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
    // the loop, those of the previous tile). Two copies, masked and not, behind a uniform branch:
    // with the mask test inside a single copy the compiler predicates the per-element compares into
    // every tile. Unmasked tiles overlap the softmax with the P V wgmmas. With plain scores a masked
    // tile waits for them first, so that the mask's registers can reuse P's (else 192 x 128 tiles
    // at d64 and 128 x 176 at d128 spill); the test then covers the warpgroup's 64 rows, since a
    // wgmma wait inside the branch must be uniform over the warpgroup. A masked tile is one that a
    // diagonal, a window edge or the last key crosses; the other warpgroups' GEMMs still run during
    // its wait. General scores (whose logit stage keeps more values live) mask before a single wait
    // after the branch, per warp of 16 rows: ptxas allocates that without spills.
    auto softmax_tile = [&](int tile, auto wait_pv) {
      const int key0 = tile * kBlockN;
      scores_to_logits<Config::kGeneralScore>(s, p, at, key0, b, h, sq, sk);
      if constexpr (Config::kPInSmem) {
        // Calls without causal or window limits only (the launch checks): the last key tile is the
        // only masked one, the same for every row, and the mask needs no P V wait (no P registers
        // to reuse): the general interval mask's registers spill these 192 x 192 tiles.
        if (key0 + kBlockN > sk) mask_keys_past_end(s, at, key0, sk);
        softmax_update(s, row_max, row_sum, scale_log2, rescale);
        sm90::fence_accumulators(s);  // as below
        wait_pv();
      } else if constexpr (!Config::kGeneralScore) {
        if (tile_fully_visible(p.mask, wg_row0, wg_row0 + 64, key0, key0 + kBlockN, sq, sk)) {
          softmax_update(s, row_max, row_sum, scale_log2, rescale);
          // Pins the softmax before the wait: otherwise it may be scheduled after it, and would no
          // longer overlap the P V wgmmas.
          sm90::fence_accumulators(s);
          wait_pv();
        } else {
          wait_pv();
          mask_scores<true>(s, p.mask, at, key0, sq, sk);
          softmax_update(s, row_max, row_sum, scale_log2, rescale);
        }
      } else {
        const int warp_row0 = wg_row0 + 16 * warp;
        if (tile_fully_visible(p.mask, warp_row0, warp_row0 + 16, key0, key0 + kBlockN, sq, sk)) {
          softmax_update(s, row_max, row_sum, scale_log2, rescale);
        } else {
          mask_scores<false>(s, p.mask, at, key0, sq, sk);
          softmax_update(s, row_max, row_sum, scale_log2, rescale);
        }
        sm90::fence_accumulators(s);  // as above
        wait_pv();
      }
    };

    // Ping-pong: the consumer warpgroups take turns issuing their wgmmas, in a ring (0, 1, .., 0),
    // so one's softmax runs while another's GEMMs hold the tensor cores. A turn is one issue point
    // (prologue S, each loop iteration's S + P V, the last P V): T + 1 turns per warpgroup for T
    // tiles. Consumer c waits on barrier kTurnBarrier + c and hands over to c + 1. Per work tile
    // the last consumer opens consumer 0's first turn and skips its own last hand-over, so every
    // arrival meets a sync. Barrier ids are constants (sm90::named_barrier_sync_of).
    constexpr uint32_t kTurnThreads = 256;  // the warpgroup handing over + the one taking the turn
    constexpr int kLastConsumer = Config::kConsumers - 1;
    auto hand_over_to = [&](int next) { sm90::named_barrier_arrive_of<kTurnBarrier, kTurnThreads>(next); };
    auto begin_turn = [&]() {
      if constexpr (Config::kPingPong) sm90::named_barrier_sync_of<kTurnBarrier, kTurnThreads>(consumer);
    };
    auto end_turn = [&](bool last) {
      if constexpr (Config::kPingPong) {
        if (consumer != kLastConsumer) hand_over_to(consumer + 1);
        else if (!last) hand_over_to(0);
      }
    };

    if (tile_begin < tile_end) {
      if (Config::kPingPong && consumer == kLastConsumer) hand_over_to(0);
      // Intra-warpgroup overlap: while the P V wgmmas of tile n - 1 run, the softmax of tile n (whose
      // S wgmmas were issued first) runs on the other units. O is rescaled after its wgmmas finish.
      // Ring states from counters (K use uses + i, V use uses + i - 1 for i = tile - tile_begin).
      const State first = State::at(uses);
      pipeline_k->consumer_wait(first);
      begin_turn();
      issue_qk(first.stage);
      end_turn(false);
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(s);
      release(&pipeline_k->empty[first.stage]);
      softmax_tile(tile_begin, [] {});  // no P V yet; O is still 0: its rescale is moot
      write_p();
      for (int tile = tile_begin + 1; tile < tile_end; ++tile) {
        const uint32_t use = uses + uint32_t(tile - tile_begin);
        const State k_state = State::at(use), v_state = State::at(use - 1);
        pipeline_k->consumer_wait(k_state);
        pipeline_v->consumer_wait(v_state);
        clear_v_tail(v_state.stage, tile - 1);
        begin_turn();
        issue_qk(k_state.stage);
        issue_pv(v_state.stage);
        end_turn(false);
        sm90::wgmma_wait<1>();  // S of this tile; the P V group may still run
        sm90::fence_accumulators(s);
        release(&pipeline_k->empty[k_state.stage]);
        softmax_tile(tile, [&] {
          sm90::wgmma_wait<0>();
          sm90::fence_accumulators(o);
        });
        release(&pipeline_v->empty[v_state.stage]);
        rescale_rows(o, rescale);
        write_p();
      }
      // Every S is done: the producer may load the next tile's Q during the last P V and the epilogue.
      release_q();
      const State v_state = State::at(uses + uint32_t(tile_end - tile_begin) - 1);
      pipeline_v->consumer_wait(v_state);
      clear_v_tail(v_state.stage, tile_end - 1);
      begin_turn();
      issue_pv(v_state.stage);
      end_turn(true);
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(o);
      release(&pipeline_v->empty[v_state.stage]);
      uses += uint32_t(tile_end - tile_begin);
    } else {
      release_q();
    }
    ++done;

    // Epilogue: normalise, write O (two elements per store) and the LSE. The sequence and head
    // come again from the tile's slot: keeping them from the top of the tile costs the widest
    // configurations a spill.
    const TileHead head = tile_head(p, grid, sm90::ld_shared_s32(tile_slot(done - 1)));
    const int b_out = head.b, h_out = head.h;
    Element* out = static_cast<Element*>(p.out.data);
    // Each row's sum (the quad's four parts) and its normaliser; 0 for a row that saw no key.
    float inv[2];
    bool empty[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
      empty[r] = row_max[r] == -INFINITY || row_sum[r] == 0.f;
      inv[r] = empty[r] ? 0.f : 1.f / row_sum[r];
    }
    if (maps.o_by_tma) {
      // Every warpgroup's last P V has read the V ring; then the block's rows, staged by every
      // warpgroup, go out in one store per column block (rows past the sequence are clipped by
      // the map) from one thread, which releases the staging area to the producer once the
      // stores have read it. That thread's read wait also orders the next tile's staging after
      // these stores when no V load comes between (a tile without keys): keep it before the
      // next epilogue barrier.
      const uint32_t o_tile = v_addr + uint32_t(kStages * Config::kVBytes - Config::kOBytes);
      sm90::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);
      sm90::store_accumulators_sw128<Element, kHeadDimV, true, kBlockM * 128>(o_tile + consumer * 64 * 128, o, inv, warp, lane);
      sm90::fence_async_shared();
      sm90::named_barrier_sync(kEpilogueBarrier, kConsumerThreads);
      if (threadIdx.x == 128) {
        for (int c = 0; c < kColumnBlocksV; ++c)
          sm90::tma_store_4d(&maps.o, reinterpret_cast<const void*>(__cvta_shared_to_generic(o_tile + c * kBlockM * 128)), 64 * c,
                             h_out, (grid.row_blocks - 1 - head.rank) * kBlockM, b_out);
        sm90::tma_store_commit();
        sm90::tma_store_wait_read();
        sm90::mbarrier_arrive(o_empty);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = at.row0 + 8 * r;
      if (row >= sq) continue;
      if (!maps.o_by_tma) {
        Element* out_row = out + p.out.offset(b_out, row, h_out);
#pragma unroll
        for (int i = 0; i < kORegs; i += 4) {
          const int col = 8 * (i / 4) + 2 * at.quad;
          if (col < p.head_dim_v)
            *reinterpret_cast<uint32_t*>(out_row + col) = sm80::pack2<Element>(o[i + 2 * r] * inv[r], o[i + 2 * r + 1] * inv[r]);
        }
      }
      // The running max is in the score units of the softmax (see fwd_softmax.cuh): times the
      // scale folded into exp2 (scale_log2 / log2(e), read here rather than kept in a register),
      // it is a natural-log logit.
      const float max_scale = Config::kGeneralScore ? 1.f : p.score.scale;
      if (at.quad == 0 && p.lse.defined())
        p.lse.data[p.lse.offset(b_out, row, h_out)] = empty[r] ? -INFINITY : row_max[r] * max_scale + logf(row_sum[r]);
    }
  }
#endif
}

}  // namespace flashattn::fa3
