// Tensor-core matrix multiply-accumulate, m16n8k16, 16-bit inputs, float accumulators.
// Fragment ownership (lane = 4 * group + quad):
//   A 16x16 row-major: a0 (group, 2quad..+1), a1 (group+8, 2quad..), a2 (group, 2quad+8..), a3 (group+8, 2quad+8..)
//   B 16x8 (k x n):    b0 (k = 2quad..+1, n = group), b1 (k = 2quad+8.., n = group)
//   C 16x8 float:      c0,c1 (group, 2quad..+1), c2,c3 (group+8, 2quad..+1)
// The lower 16 bits of each packed register hold the element with the smaller column / k index.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::sm80 {

template <typename Element>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats packed into one register of the element type (x in the low half).
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float x, float y);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float x, float y) {
  __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float x, float y) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}

// The two elements of a pack2 register as floats (low half first).
template <typename Element>
__device__ __forceinline__ float2 unpack2(uint32_t packed);

template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t packed) {
  return __half22float2(*reinterpret_cast<const __half2*>(&packed));
}

template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t packed) {
  return make_float2(__uint_as_float(packed << 16), __uint_as_float(packed & 0xffff0000u));
}

}  // namespace flashattn::sm80
