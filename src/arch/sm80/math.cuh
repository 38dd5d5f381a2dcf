// Fast device math used in the softmax.
#pragma once

namespace flashattn::sm80 {

// 2^x on the special-function unit; ex2.approx(-inf) = +0, which masked logits rely on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// max(a, b), NaN when either is (fmaxf returns the other operand): a row max must carry a NaN
// score to the row's output and LSE, as the math does, not drop it.
__device__ __forceinline__ float max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

}  // namespace flashattn::sm80
