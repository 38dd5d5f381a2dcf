// Launch of one FA3 forward configuration: the tensor maps of the call, then the kernel. Each
// fwd_hdim*.cu instantiates the configurations of one head dim (one translation unit each keeps
// the builds parallel).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "common/cuda_status.h"
#include "fa3/fwd_kernel.cuh"
#include "fa3/fwd_tuning.h"
#include "fa3/launch_common.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// Tensor maps of q, k, v for kBlockM-row Q boxes and kBlockN-row K/V boxes (fwd_launch.cu).
Status make_fwd_maps(const AttnProblem& p, int block_m, int block_n, FwdMaps* maps);

template <typename Config>
Status launch(const AttnProblem& p, cudaStream_t stream) {
  // Nothing to compute (and a zero extent would make the tensor-map encode fail): return first.
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (row_blocks == 0 || p.batch == 0 || p.heads_q == 0) return {};
  // Dense unmasked calls run persistent, one CTA per SM (the kernel fills an SM's shared memory),
  // in the static order: their tiles are all alike, so a stride balances. Tiles of unequal length
  // (causal, windowed, varlen, seqused_k) run persistent in the dynamic order (a tile counter in a
  // stream-ordered allocation, zeroed before the launch), or with FwdTuning::dynamic_schedule off
  // a CTA per tile, which the hardware hands out as SMs free up.
  const bool uniform = p.lens.cu_seqlens_q == nullptr && p.lens.seqused_k == nullptr && !p.mask.limits_keys();
  const bool dynamic = !uniform && fwd_tuning().dynamic_schedule;
  FwdGrid grid{int(row_blocks), int(row_blocks * p.heads_q * p.batch), nullptr, 0};
  if (dynamic && fwd_tuning().section_mb > 0) {
    // Sections of as many (sequence, head) pairs as have their K and V (the longest sequence's) in
    // section_mb: a GQA group's query heads share theirs.
    const int64_t kv_head_bytes = std::max<int64_t>(p.lens.seqlen_k, 1) * (p.head_dim + p.head_dim_v) * 2;
    const int64_t fit = int64_t(fwd_tuning().section_mb) * (1 << 20) / kv_head_bytes * (p.heads_q / p.heads_k);
    grid.section_shift = section_shift_for(p.heads_q * p.batch, fit);
  }
  FwdMaps maps;
  if (Status st = make_fwd_maps(p, Config::kBlockM, Config::kBlockN, &maps); !st.ok()) return st;
  auto kernel = fwd_kernel<Config>;
  FLASHATTN_CUDA_CHECK("fa3 fwd", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes));
  const int64_t ctas = uniform || dynamic ? std::min<int64_t>(grid.work_tiles, sm_count()) : grid.work_tiles;
  StreamBuffer counter(stream);  // freed in stream order after the kernel
  if (dynamic && ctas < grid.work_tiles) {
    if (Status st = counter.allocate(sizeof(int), "fa3 fwd: allocating the tile counter"); !st.ok()) return st;
    FLASHATTN_CUDA_CHECK("fa3 fwd: zeroing the tile counter", cudaMemsetAsync(counter.as<int>(), 0, sizeof(int), stream));
    grid.tile_counter = counter.as<int>();
  }
  kernel<<<unsigned(ctas), Config::kThreads, Config::kSmemBytes, stream>>>(maps, p, grid);
  FLASHATTN_CUDA_CHECK("fa3 fwd: launch", cudaGetLastError());
  return counter.free("fa3 fwd: freeing the tile counter");
}

// The configurations of one (head dim, head dim v): general scores (softcap, ALiBi, scale <= 0) run
// on two consumer warpgroups without ping-pong, with kBlockNGeneral keys per tile (their logit
// stage needs more registers); plain scores on kPlainConsumers warpgroups with kBlockN keys,
// with ping-pong by the rule below unless FwdTuning forces it.
// kPInSmem: the plain configurations take P V's P from shared memory (FwdConfig::kPInSmem).
template <typename Element, int kHeadDim, int kHeadDimV, int kBlockN, int kBlockNGeneral = kBlockN, int kPlainConsumers = 2,
          bool kPInSmem = false>
Status launch_head_dim(const AttnProblem& p, cudaStream_t stream) {
  constexpr int kStages = 2;
  // Ping-pong helps where the softmax is long against the GEMMs (d64, causal d128: +1-8 %); at d256
  // unmasked the GEMMs dominate and the turns only cost (H200, same run: off +1.5-3.7 % at 512-16k).
  const bool pingpong = fwd_tuning().pingpong >= 0 ? fwd_tuning().pingpong == 1 : !(kHeadDim == 256 && !p.mask.limits_keys());
  if (!p.plain_forward_scores())
    return launch<FwdConfig<Element, kHeadDim, kHeadDimV, kBlockNGeneral, kStages, true, false>>(p, stream);
  if (pingpong)
    return launch<FwdConfig<Element, kHeadDim, kHeadDimV, kBlockN, kStages, false, true, kPlainConsumers, kPInSmem>>(p, stream);
  return launch<FwdConfig<Element, kHeadDim, kHeadDimV, kBlockN, kStages, false, false, kPlainConsumers, kPInSmem>>(p, stream);
}

// Per head dim (the kernel's, after padding): fwd_hdim64.cu, fwd_hdim128.cu, ...
Status fwd_hdim64(const AttnProblem& p, cudaStream_t stream);
Status fwd_hdim128(const AttnProblem& p, cudaStream_t stream);
Status fwd_hdim192(const AttnProblem& p, cudaStream_t stream);  // head_dim_v 192 or 128
Status fwd_hdim256(const AttnProblem& p, cudaStream_t stream);

}  // namespace flashattn::fa3
