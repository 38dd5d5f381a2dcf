// The head dim an FA3 forward call runs at. Host code, free of CUDA.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashattn::fa3 {

// The next multiple of 64 (validation caps head dims at 256).
inline int kernel_head_dim(int64_t head_dim) { return int(std::min<int64_t>((head_dim + 63) / 64 * 64, 256)); }

}  // namespace flashattn::fa3
