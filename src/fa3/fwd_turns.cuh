// Ping-pong between the FA3 forward's consumer warpgroups: they take turns issuing their wgmmas,
// in a ring (0, 1, .., 0), so one's softmax runs while another's GEMMs hold the tensor cores. A
// turn is one issue point (prologue S, each loop iteration's S + P V, the last P V): T + 1 turns
// per warpgroup for T tiles. Consumer c waits on barrier kFwdTurnBarrier + c and hands over to
// c + 1. Per work tile the last consumer opens consumer 0's first turn and skips its own last
// hand-over, so every arrival meets a sync. Barrier ids are constants
// (sm90::named_barrier_sync_of). Without Config::kPingPong every call is a no-op.
#pragma once

#include <cstdint>

#include "arch/sm90/warpgroup.cuh"
#include "fa3/fwd_smem.cuh"

namespace flashattn::fa3 {

template <typename Config>
struct FwdTurns {
  static constexpr uint32_t kTurnThreads = 256;  // the warpgroup handing over + the one taking the turn
  static constexpr int kLastConsumer = Config::kConsumers - 1;
  int consumer;

  // Before a work tile's first turn.
  __device__ __forceinline__ void open() const {
    if (Config::kPingPong && consumer == kLastConsumer) hand_over_to(0);
  }
  __device__ __forceinline__ void begin() const {
    if constexpr (Config::kPingPong) sm90::named_barrier_sync_of<kFwdTurnBarrier, kTurnThreads>(consumer);
  }
  // `last`: the work tile's last turn.
  __device__ __forceinline__ void end(bool last) const {
    if constexpr (Config::kPingPong) {
      if (consumer != kLastConsumer) hand_over_to(consumer + 1);
      else if (!last) hand_over_to(0);
    }
  }

 private:
  __device__ __forceinline__ static void hand_over_to(int next) { sm90::named_barrier_arrive_of<kFwdTurnBarrier, kTurnThreads>(next); }
};

}  // namespace flashattn::fa3
