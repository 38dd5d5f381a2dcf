// A vector of floats as wide as the target's SIMD registers, through the GCC/Clang vector
// extension: one code path for every target (lowered to AVX-512, AVX2 or SSE by the compiler),
// so the code the tests run is the code every build runs.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashattn::cpu::simd {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
inline constexpr int kRegisters = 32;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
inline constexpr int kRegisters = 16;
#else
inline constexpr int kLanes = 4;
inline constexpr int kRegisters = 16;
#endif

typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline VecF load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));  // an unaligned vector load
  return v;
}
inline void store(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
inline VecF broadcast(float x) { return x - VecF{}; }  // x - 0 folds to a plain broadcast; 0 + x does not (-0)

// Largest element of x[0..n) (-inf for n == 0); exact in any order.
inline float max_of(const float* x, int n) {
  VecF acc = broadcast(-__builtin_inff());
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const VecF v = load(x + j);
    acc = v > acc ? v : acc;
  }
  float m = -__builtin_inff();
  for (int l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Sum of x[0..n) in kLanes partial sums (a fixed order: deterministic, float rounding only).
inline float sum_of(const float* x, int n) {
  VecF acc = VecF{};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) acc += load(x + j);
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; j < n; ++j) s += x[j];
  return s;
}

}  // namespace flashattn::cpu::simd
