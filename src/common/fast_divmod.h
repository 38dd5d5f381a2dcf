// Division by a divisor fixed for a whole launch, as a multiply-high and a shift (Granlund and
// Montgomery's method): built once on the host, a kernel divides in two instructions instead of
// the twenty-odd of an integer division. Exact for dividends below 2^31.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct FastDivmod {
  int divisor = 1;
  uint32_t multiplier = 0;  // ceil(2^(31 + log) / divisor), log = ceil(log2(divisor)); unused for 1
  uint32_t shift = 0;       // log - 1

  FastDivmod() = default;
  // divisor >= 1.
  explicit FastDivmod(int d) : divisor(d) {
    if (d == 1) return;
    uint32_t log = 0;
    while ((int64_t(1) << log) < d) ++log;
    multiplier = uint32_t(((uint64_t(1) << (31 + log)) + uint64_t(d) - 1) / uint64_t(d));
    shift = log - 1;
  }

  // n / divisor for 0 <= n < 2^31.
  FA_HD int div(int n) const {
    if (divisor == 1) return n;
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(uint32_t(n), multiplier);
#else
    const uint32_t high = uint32_t((uint64_t(uint32_t(n)) * multiplier) >> 32);
#endif
    return int(high >> shift);
  }
  // The quotient, and the remainder in *rem.
  FA_HD int divmod(int n, int* rem) const {
    const int q = div(n);
    *rem = n - q * divisor;
    return q;
  }
};

}  // namespace flashattn
