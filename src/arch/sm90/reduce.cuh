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

}  // namespace flashattn::sm90
