// Scalar conversions between float and the storage types (fp16, bf16, fp8 e4m3), by bit
// manipulation so that host and device round identically (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace flashattn::numeric {

FA_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

FA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

FA_HD float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

FA_HD uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

FA_HD float fp16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

FA_HD uint16_t float_to_fp16(float x) {
  uint32_t u = float_bits(x);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // result is subnormal (or zero): round a * 2^24 to an integer, nearest even
    float v = bits_float(a) * 16777216.0f;  // exact: scaling by a power of two
    uint32_t vi = uint32_t(v);
    float rem = v - float(vi);
    if (rem > 0.5f || (rem == 0.5f && (vi & 1u))) ++vi;
    return uint16_t(sign | vi);
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

// fp8 e4m3 (OCP "fn" variant: no infinities, 0x7f/0xff = NaN, max 448).
FA_HD float e4m3_to_float(uint8_t b) {
  uint32_t sign = uint32_t(b & 0x80u) << 24;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t man = b & 0x7u;
  if (exp == 0xf && man == 0x7) return bits_float(sign | 0x7fc00000u);
  if (exp == 0) {
    float v = float(man) * 0.001953125f;  // man * 2^-9
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

FA_HD uint8_t float_to_e4m3(float x) {
  uint32_t u = float_bits(x);
  uint8_t sign = uint8_t((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7f);
  if (a >= 0x43e80000u) return uint8_t(sign | 0x7e);  // >= 464 saturates to 448
  if (a < 0x3c800000u) {                               // below 2^-6: subnormal
    float v = bits_float(a) * 512.0f;
    uint32_t vi = uint32_t(v);
    float rem = v - float(vi);
    if (rem > 0.5f || (rem == 0.5f && (vi & 1u))) ++vi;
    return uint8_t(sign | vi);
  }
  uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
  return uint8_t(sign | ((rounded - 0x3c000000u) >> 20));
}

}  // namespace flashattn::numeric
