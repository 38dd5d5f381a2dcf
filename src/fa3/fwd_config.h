// The FA3 forward's tile shape, shared-memory layout and tensor maps (fwd_kernel.cuh).
#pragma once

#include <cuda.h>

namespace flashattn::fa3 {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockN_, int kStages_, bool kGeneralScore_, bool kPingPong_,
          int kConsumers_ = 2>
struct FwdConfig {
  // Every 16-bit kernel takes calls of any mask (Fp8FwdConfig::kNoKeyLimits: fp8's kernels for
  // calls without causal or window limits).
  static constexpr bool kNoKeyLimits = false;
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
  using OutElement = Element_;  // O is written in the inputs' dtype
  // The fp8 configuration (fp8_fwd_config.h) shares the role units; these are its knobs at their
  // 16-bit values: no V transpose, P unshifted.
  static constexpr bool kFp8 = false;
  static constexpr int kTransposeWarps = 0, kPShift = 0, kVtBytes = 0;
  static constexpr bool kOneSoftmaxCopy = false;  // masked and unmasked tiles in two copies (fwd_consumer.cuh)
  // The lazy O rescale's slack in exp2 units (fwd_softmax.cuh): P stays below 2^8.
  static constexpr float kRescaleSlack = 8.f;
  // Bytes and elements per row of a shared-memory column block (the swizzle span) of Q/K and V.
  static constexpr int kQKSwizzle = 128, kVSwizzle = 128, kQKBlockCols = 64, kVBlockCols = 64;
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
  // O staged for the TMA store, [column block of v][kBlockM rows][64]: the last kOBytes of the
  // V ring (as FA3 does: no room for a buffer of its own at d128 x 176 or d256), which is free
  // once every warpgroup's last P V is done; the producer loads the next tile's V only after the
  // store has read it.
  static constexpr int kOBytes = kBlockM * kHeadDimV * 2;
  // Q, then the K and V rings, then the barriers; every tile 1024-byte aligned for the swizzle.
  static constexpr int kSmemBytes = kQBytes + kStages * (kKBytes + kVBytes) + 1024 /*barriers*/ + 1024 /*alignment*/;
  static_assert(kHeadDim % 64 == 0 && kHeadDimV % 64 == 0 && kBlockN % 16 == 0, "tile shape");
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

}  // namespace flashattn::fa3
