// The FA3 forward consumer's wgmma issues for one warpgroup's 64 rows: S = Q K^T (both operands in
// shared memory, K-major) and O += P V (P as the register A operand; V MN-major, or fp8's Vt
// K-major). Each issue is one commit group.
#pragma once

#include <cstdint>

#include "arch/sm90/wgmma.cuh"
#include "arch/sm90/wgmma_fp8_ops.cuh"

namespace flashattn::fa3 {

template <typename Config>
struct FwdGemms {
  uint32_t q_addr;   // this warpgroup's 64 rows of Q
  uint32_t k_addr;   // the K ring
  uint32_t pv_addr;  // the ring P V reads: V (16-bit) or V transposed (fp8)

  // S = Q K^T: k16 step j reads column block j / 4 at byte offset 32 * (j % 4). fp8: k32 step j
  // reads column block 32 j / W at byte offset 32 j % W (W = kQKSwizzle, rows of W bytes).
  template <int kSRegs>
  __device__ __forceinline__ void issue_qk(float (&s)[kSRegs], int stage) const {
    constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
    const uint32_t q_base = sm90::opaque_u32(q_addr), k_base = sm90::opaque_u32(k_addr + stage * Config::kKBytes);
    sm90::wgmma_fence();
    if constexpr (Config::kFp8) {
      constexpr int kW = Config::kQKSwizzle;
      const sm90::SmemDescriptor q(sm90::kmajor_descriptor_sw<kW>(q_base)), k(sm90::kmajor_descriptor_sw<kW>(k_base));
#pragma unroll
      for (int j = 0; j < kHeadDim / 32; ++j)
        sm90::WgmmaE4m3<kBlockN>::ss(s, q.at((32 * j / kW) * kBlockM * kW + (32 * j) % kW),
                                     k.at((32 * j / kW) * kBlockN * kW + (32 * j) % kW), j > 0);
    } else {
      const sm90::SmemDescriptor q(sm90::kmajor_descriptor_at(q_base)), k(sm90::kmajor_descriptor_at(k_base));
#pragma unroll
      for (int j = 0; j < kHeadDim / 16; ++j)
        sm90::Wgmma<typename Config::Element, kBlockN>::template ss<0>(s, q.at((j / 4) * kBlockM * 128 + (j % 4) * 32),
                                                                       k.at((j / 4) * kBlockN * 128 + (j % 4) * 32), j > 0);
    }
    sm90::wgmma_commit();
  }

  // O += P V: V's k16 step kk starts at key row 16kk (2048 bytes into each column block), column
  // blocks kBlockN * 128 bytes apart (MN-major).
  // fp8: k32 step kk of Vt (K-major, keys in 128-key blocks of kHeadDimV rows) reads block
  // kk / 4 at byte offset 32 (kk % 4).
  template <int kORegs, int kFragments>
  __device__ __forceinline__ void issue_pv(float (&o)[kORegs], const uint32_t (&p_frag)[kFragments][4], int stage) const {
    constexpr int kBlockN = Config::kBlockN, kHeadDimV = Config::kHeadDimV;
    if constexpr (Config::kFp8) {
      const sm90::SmemDescriptor vt(sm90::kmajor_descriptor_sw<128>(sm90::opaque_u32(pv_addr + stage * Config::kVtBytes)));
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 32; ++kk)
        sm90::WgmmaE4m3<kHeadDimV>::rs(o, p_frag[kk], vt.at((kk / 4) * kHeadDimV * 128 + (kk % 4) * 32), 1);
    } else {
      const sm90::SmemDescriptor v(sm90::mnmajor_descriptor_at(sm90::opaque_u32(pv_addr + stage * Config::kVBytes), kBlockN * 128));
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        sm90::Wgmma<typename Config::Element, kHeadDimV>::template rs<1>(o, p_frag[kk], v.at(kk * 2048), 1);
    }
    sm90::wgmma_commit();
  }
};

}  // namespace flashattn::fa3
