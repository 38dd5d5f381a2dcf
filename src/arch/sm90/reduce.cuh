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

}  // namespace flashattn::sm90
