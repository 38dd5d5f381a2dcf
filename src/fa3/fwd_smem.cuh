// Where the FA3 forward's tiles and barriers live in a CTA's shared memory (FwdConfig's layout):
// Q, then the K and V rings, the transposed V ring (fp8), then the barriers; and the tile slots
// through which the producer hands work tiles to the consumers.
#pragma once

#include <cstdint>

#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/wgmma.cuh"
#include "fa3/fwd_config.h"

namespace flashattn::fa3 {

// Named barriers of the consumer warpgroups (ids 1..15; 0 is __syncthreads): the clear of a
// stage's V tail (all consumer threads), the ping-pong turns (kFwdTurnBarrier + c: consumer c's
// turn; two warpgroups meet at each), and the epilogue (every consumer's last P V done, then O
// staged).
inline constexpr uint32_t kFwdClearBarrier = 1, kFwdTurnBarrier = 2, kFwdEpilogueBarrier = 8;

template <typename Config>
struct FwdSmem {
  using Element = typename Config::Element;
  // The Vt ring (fp8) lies right after the V ring.
  static constexpr uint32_t kVtFromV = uint32_t(Config::kStages * Config::kVBytes);
  Element* q;
  Element* k;
  Element* v;
  unsigned char* vt;  // fp8: V transposed (Fp8FwdConfig), what the consumers' P V reads
  // K and V have separate pipelines: a K stage is released as soon as S = Q K^T is done, so the
  // next K load overlaps the softmax; V is released after P V. Sharing one barrier per (K, V)
  // stage would hold K until P V finishes and leave the next load exposed.
  sm90::Pipeline<Config::kStages>* pipeline_k;
  sm90::Pipeline<Config::kStages>* pipeline_v;
  // Q of the current work tile: full when loaded, empty when every consumer's last S is done.
  uint64_t* q_full;
  uint64_t* q_empty;
  // O of the previous work tile read by its TMA stores: the next tile's V may overwrite the
  // staging area.
  uint64_t* o_empty;
  // fp8: the transposing warps' ring (full: all of them wrote a stage; empty: every consumer warp
  // released it), and per V stage the keys of the tile that are in the sequence (the loader writes
  // it before the stage's loads; -1: no tile left, the transposing warps stop).
  sm90::Pipeline<Config::kStages>* pipeline_vt = nullptr;
  int* v_keys = nullptr;
  // The work tiles the producer picked for the consumers, -1 when none is left (fwd_scheduler.cuh),
  // the CTA's n-th tile in slot n % 2: the consumers read a tile's slot again for its epilogue
  // (cheaper than keeping the tile in a register through the loop), and the producer writes that
  // slot again only for tile n + 2, after Q of tile n + 1 was released. The mbarrier arrive
  // (release) and wait (acquire) order the accesses. A static shared array: a constant address.
  // Slot 2 is the producer's own: the key count of its current tile.
  int* tile_slots;

  // `smem`: the dynamic shared memory, 1024-byte aligned.
  __device__ __forceinline__ FwdSmem(unsigned char* smem, int* slots) : tile_slots(slots) {
    q = reinterpret_cast<Element*>(smem);
    k = reinterpret_cast<Element*>(smem + Config::kQBytes);
    v = reinterpret_cast<Element*>(smem + Config::kQBytes + Config::kStages * Config::kKBytes);
    vt = reinterpret_cast<unsigned char*>(v) + kVtFromV;
    pipeline_k = reinterpret_cast<sm90::Pipeline<Config::kStages>*>(vt + Config::kStages * Config::kVtBytes);
    pipeline_v = pipeline_k + 1;
    q_full = reinterpret_cast<uint64_t*>(pipeline_v + 1);
    q_empty = q_full + 1;
    o_empty = q_empty + 1;
    if constexpr (Config::kFp8) {
      pipeline_vt = reinterpret_cast<sm90::Pipeline<Config::kStages>*>(o_empty + 1);
      v_keys = reinterpret_cast<int*>(pipeline_vt + 1);
    }
  }
  __device__ __forceinline__ uint32_t tile_slot(uint32_t n) const { return sm90::smem_u32(&tile_slots[n & 1u]); }
  __device__ __forceinline__ uint32_t producer_keys_slot() const { return sm90::smem_u32(&tile_slots[2]); }
};

}  // namespace flashattn::fa3
