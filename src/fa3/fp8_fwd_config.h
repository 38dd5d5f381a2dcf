// The FA3 forward's fp8 (e4m3) configuration: the interface of FwdConfig (fwd_config.h), so that
// the same role units (producer, consumer, epilogue, scheduler, softmax) run it, plus what fp8
// adds. Shared-memory layout:
//   Q [d / W][kBlockM rows][W bytes], K and V stages [d / W][kBlockN rows][W bytes] as the TMA
//   writes them (W = the swizzle span: 128 bytes when d is a multiple of 128, else 64);
//   Vt stages: V transposed by the producer warpgroup's other warps (transpose_fp8.cuh) into the
//   K-major B operand of O += P V, [ceil(kBlockN / 128)][dv rows][128 bytes];
//   then the barriers (fwd_smem.cuh).
// The V stages are only the TMA's landing area; the consumers read Vt. O is staged for its TMA
// store in the last kOBytes of the V stages, as the 16-bit kernels do, where it fits.
#pragma once

#include <cuda_fp8.h>

#include "arch/sm90/transpose_fp8.cuh"

namespace flashattn::fa3 {

template <typename OutElement_, int kHeadDim_, int kBlockN_, int kStages_, bool kGeneralScore_, bool kPingPong_, int kConsumers_ = 2,
          bool kNoKeyLimits_ = false>
struct Fp8FwdConfig {
  static constexpr bool kFp8 = true;
  using Element = __nv_fp8_e4m3;  // q, k, v
  using OutElement = OutElement_;  // O: bfloat16 or float16
  // Only calls without causal or window limits (the launch checks): the last key tile is the only
  // masked one, its keys past the sequence's end the same for every row.
  static constexpr bool kNoKeyLimits = kNoKeyLimits_;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kConsumers = kConsumers_;
  // setmaxnreg split (as FwdConfig): the transposing warps live within the producer's share.
  // Two consumers: 40 + 2 x 232 where the consumers fit in 232 (d <= 128), so that the
  // transposing warps keep two units in flight (kTransposeInFlight); d256's consumers need 240.
  static constexpr bool kWideProducer = kConsumers == 2 && kHeadDim_ <= 128;
  static constexpr int kProducerRegisters = kConsumers == 3 ? 32 : kWideProducer ? 40 : 24;
  static constexpr int kConsumerRegisters = kConsumers == 3 ? 160 : kWideProducer ? 232 : 240;
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static constexpr bool kGeneralScore = kGeneralScore_;
  // One head dim for q, k and v: 64, 128 or 256 (a call's smaller one runs in the next, the TMA
  // zero-filling the columns past the tensor's).
  static constexpr int kHeadDim = kHeadDim_, kHeadDimV = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "fp8 head dims 64, 128, 256");
  static constexpr int kQKSwizzle = kHeadDim % 128 == 0 ? 128 : 64, kVSwizzle = kQKSwizzle;
  static constexpr int kQKBlockCols = kQKSwizzle, kVBlockCols = kVSwizzle;  // one byte per element
  static constexpr int kColumnBlocks = kHeadDim / kQKBlockCols, kColumnBlocksV = kHeadDimV / kVBlockCols;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN % 32 == 0 && kBlockN <= 256, "keys per tile: a multiple of the k32 step, at most 256");
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Warps 1..3 of the producer warpgroup transpose V (warp 0's first thread issues the loads).
  static constexpr int kTransposeWarps = 3;
  // 16 x 32 units in flight per transposing warp (transpose_fp8.cuh): two, except in the
  // 24-register producer of d256, where the second unit's registers spill.
  static constexpr int kTransposeInFlight = kProducerRegisters > 24 ? 2 : 1;
  // The consumers' softmax in one copy for masked and unmasked tiles (fwd_consumer.cuh).
  static constexpr bool kOneSoftmaxCopy = true;
  // The lazy O rescale (fwd_softmax.cuh) within what e4m3 holds: with P's 2^kPShift, P stays below
  // 2^8.75 = 430.5, under e4m3's largest value 448, so its rounding is the same relative rounding
  // as without the slack (and its small weights sit higher in the normal range, not lower). On at
  // d64 and d256, where it measured faster; d128 rescales every tile (docs/PERF.md).
  static constexpr float kRescaleSlack = kHeadDim_ == 128 ? 0.f : 0.75f;
  // P = exp2(logit - max + kPShift): the row's largest weight is 2^8, not 1, so the small
  // weights stay in e4m3's normal range (2^-6 and up); the row sum carries the same factor and
  // the LSE takes it out.
  static constexpr int kPShift = 8;
  static constexpr int kQBytes = kBlockM * kHeadDim;
  static constexpr int kKBytes = kBlockN * kHeadDim;   // one stage
  static constexpr int kVBytes = kBlockN * kHeadDimV;  // one stage, as loaded
  static constexpr int kVtBytes = sm90::kTransposedBytes<kBlockN, kHeadDimV>;  // one stage, transposed
  static constexpr int kOBytes = kBlockM * kHeadDimV * 2;  // 16-bit O, staged in the V stages for TMA stores
  static constexpr int kSmemBytes = kQBytes + kStages * (kKBytes + kVBytes + kVtBytes) + 1024 /*barriers*/ + 1024 /*alignment*/;
  static_assert(kQBytes % 1024 == 0 && kKBytes % 1024 == 0 && kVBytes % 1024 == 0 && kVtBytes % 1024 == 0,
                "every tile 1024-byte aligned for the swizzles");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm90 CTA");
};

}  // namespace flashattn::fa3
