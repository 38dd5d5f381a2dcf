// The fp8 forward's V transpose role (warps 1..3 of the producer warpgroup): V stages in the order
// the loader fills them (fwd_producer.cuh) become the Vt stages the consumers' P V reads
// (transpose_fp8.cuh), overlapped with the consumers' GEMMs. Keys past the sequence's end are
// written as zeros (the stage carries how many are in it), so no consumer clears V tails.
#pragma once

#include <cstdint>

#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/transpose_fp8.cuh"
#include "fa3/fwd_smem.cuh"

namespace flashattn::fa3 {

// `worker`: this warp's index among the Config::kTransposeWarps transposing warps.
template <typename Config>
__device__ __forceinline__ void fwd_transpose_v(const FwdSmem<Config>& sm, int worker) {
  using State = sm90::PipelineState<Config::kStages>;
  const int lane = threadIdx.x % 32;
  const uint32_t v_addr = sm90::smem_u32(sm.v);  // and Vt at a constant offset: one base register
  for (uint32_t use = 0;; ++use) {
    const State st = State::at(use);
    sm90::mbarrier_wait(&sm.pipeline_v->full[st.stage], st.phase);
    const int keys = sm90::ld_shared_s32(sm90::smem_u32(&sm.v_keys[st.stage]));
    if (keys < 0) break;  // no tile left
    // The consumers' P V of this Vt stage's previous use is done.
    sm90::mbarrier_wait(&sm.pipeline_vt->empty[st.stage], st.phase ^ 1u);
    sm90::transpose_e4m3_to_kmajor<Config::kBlockN, Config::kHeadDimV, Config::kVSwizzle, Config::kTransposeWarps,
                                   Config::kTransposeInFlight>(
        sm90::opaque_u32(v_addr + uint32_t(st.stage * Config::kVBytes)),
        sm90::opaque_u32(v_addr + FwdSmem<Config>::kVtFromV + uint32_t(st.stage * Config::kVtBytes)), keys, worker, lane);
    // The stores, before the consumers' wgmma (async proxy) reads them; one arrival per warp on
    // Vt full first (the consumers wait for it), then every lane on V empty, releasing its own
    // loads before the next TMA load of the stage (one lane's arrival after __syncwarp leaves the
    // other lanes' loads unordered for compute-sanitizer's racecheck).
    sm90::fence_async_shared();
    __syncwarp();
    if (lane == 0) sm90::mbarrier_arrive(&sm.pipeline_vt->full[st.stage]);
    sm90::mbarrier_arrive(&sm.pipeline_v->empty[st.stage]);
  }
}

}  // namespace flashattn::fa3
