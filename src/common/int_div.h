// Integer division rounding toward -inf and +inf (C++ rounds toward 0), for b > 0 and |a| + b
// within T's range (a negative a is negated and b - 1 added): host and device, 32 or 64 bits.
#pragma once

#include "common/host_device.h"

namespace flashattn {

template <typename T>
FA_HD constexpr T floor_div(T a, T b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

template <typename T>
FA_HD constexpr T ceil_div(T a, T b) {
  return -floor_div(-a, b);
}

}  // namespace flashattn
