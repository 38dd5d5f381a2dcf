// Loading and storing rows of any storage dtype as float on the host.
#pragma once

#include <cstdint>

#include "common/numeric.h"
#include "flashattn/flashattn.h"

namespace flashattn::cpu {

inline float load_element(const void* base, int64_t i, DType dtype) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F16: return numeric::fp16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16: return numeric::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::F8E4M3: return numeric::e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    default: return 0.f;
  }
}

inline void store_element(void* base, int64_t i, DType dtype, float x) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[i] = x; break;
    case DType::F16: static_cast<uint16_t*>(base)[i] = numeric::float_to_fp16(x); break;
    case DType::BF16: static_cast<uint16_t*>(base)[i] = numeric::float_to_bf16(x); break;
    case DType::F8E4M3: static_cast<uint8_t*>(base)[i] = numeric::float_to_e4m3(x); break;
    default: break;
  }
}

// Rounds x to the nearest value representable in dtype (identity for F32).
inline float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::F16: return numeric::fp16_to_float(numeric::float_to_fp16(x));
    case DType::BF16: return numeric::bf16_to_float(numeric::float_to_bf16(x));
    case DType::F8E4M3: return numeric::e4m3_to_float(numeric::float_to_e4m3(x));
    default: return x;
  }
}

inline void load_row(const void* base, int64_t offset, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32: {
      const float* p = static_cast<const float*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
      break;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = numeric::fp16_to_float(p[i]);
      break;
    }
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = numeric::bf16_to_float(p[i]);
      break;
    }
    case DType::F8E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = numeric::e4m3_to_float(p[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_element(base, offset + i, dtype);
  }
}

inline void store_row(void* base, int64_t offset, DType dtype, int64_t n, const float* src) {
  switch (dtype) {
    case DType::F32: {
      float* p = static_cast<float*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = src[i];
      break;
    }
    case DType::BF16: {
      uint16_t* p = static_cast<uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = numeric::float_to_bf16(src[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) store_element(base, offset + i, dtype, src[i]);
  }
}

}  // namespace flashattn::cpu
