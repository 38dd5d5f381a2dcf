// The FA3 backward kernels built per head dim: bwd_hdim*.cu instantiate exactly these, in both
// element types and both score paths; bwd_plan takes the first of its head dim; fa3::bwd refuses
// a forced plan that names another. Variants measured slower were deleted (docs/PERF.md,
// eleventh session: L2 EVICT_LAST hints and a 24-register producer gained nothing). Host and device.
#pragma once

#include "fa3/bwd_plan.h"

namespace flashattn::fa3 {

// A kernel beside the head dim: its rows per step and its variant.
struct BwdKernel {
  int block_m = 64;
  BwdVariant variant{};
  friend constexpr bool operator==(const BwdKernel&, const BwdKernel&) = default;
};

// d64: the warpgroups take turns computing a whole step's dQ (one bulk add per step); d256: dQ's
// first slice issued before dV/dK, its adds overlapping them. (docs/PERF.md, eleventh session.)
inline constexpr BwdKernel kBwdKernels64[] = {{64, {.dq = BwdDq::Alternate}}};
inline constexpr BwdKernel kBwdKernels128[] = {{64, {}}};
inline constexpr BwdKernel kBwdKernels256[] = {{64, {.dq = BwdDq::Overlap}}};

// The kernels built at a head dim (64, 128 or 256; else none), as a range.
struct BwdKernelList {
  const BwdKernel* first = nullptr;
  const BwdKernel* last = nullptr;
  constexpr const BwdKernel* begin() const { return first; }
  constexpr const BwdKernel* end() const { return last; }
};
constexpr BwdKernelList bwd_kernels_of(int head_dim) {
  auto of = [](const auto& list) { return BwdKernelList{list, list + sizeof(list) / sizeof(list[0])}; };
  return head_dim == 64 ? of(kBwdKernels64) : head_dim == 128 ? of(kBwdKernels128) : head_dim == 256 ? of(kBwdKernels256) : BwdKernelList{};
}

// Whether a kernel of this head dim, block_m and variant is built.
constexpr bool bwd_kernel_built(int head_dim, int block_m, const BwdVariant& variant) {
  for (const BwdKernel& k : bwd_kernels_of(head_dim))
    if (k.block_m == block_m && k.variant == variant) return true;
  return false;
}

}  // namespace flashattn::fa3
