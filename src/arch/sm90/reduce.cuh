// Global-memory reductions without a returned value (sm90).
#pragma once

namespace flashattn::sm90 {

// global[0..3] += v as one 16-byte vector reduction (16-byte aligned). Written as `red`: the
// float4 atomicAdd may compile to an ATOMG that returns the old values (registers held until the
// reply comes back) even when the result is unused.
__device__ __forceinline__ void red_add_v4(float* global, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(global), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
// The same at global + kOffsetBytes: the offset rides in the instruction, so adds at several
// offsets from one base hold one 64-bit address, not one each.
template <int kOffsetBytes>
__device__ __forceinline__ void red_add_v4_at(float* global, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0 + %5], {%1, %2, %3, %4};\n" ::"l"(global), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w),
               "n"(kOffsetBytes)
               : "memory");
}

// red_add_v4_at with the L2 hint EVICT_LAST (the sums stay in L2 for the next adds to the same
// rows); the policy is formed beside each add (createpolicy), not held in registers.
template <int kOffsetBytes>
__device__ __forceinline__ void red_add_v4_at_evict_last(float* global, float4 v) {
  asm volatile(
      "{\n"
      ".reg .b64 policy;\n"
      "createpolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
      "red.global.add.L2::cache_hint.v4.f32 [%0 + %5], {%1, %2, %3, %4}, policy;\n"
      "}\n" ::"l"(global),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "n"(kOffsetBytes)
      : "memory");
}

}  // namespace flashattn::sm90
