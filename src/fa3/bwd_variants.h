// The FA3 backward kernels built per head dim: bwd_hdim*.cu instantiate exactly these, in both
// element types and the score paths each takes; bwd_plan takes the first of its head dim that
// takes the call's; fa3::bwd refuses a forced plan that names another. Variants measured slower
// were deleted (docs/PERF.md, eleventh session: L2 EVICT_LAST hints and a 24-register producer
// gained nothing). Host and device.
#pragma once

#include "fa3/bwd_plan.h"

namespace flashattn::fa3 {

// A kernel beside the head dim: its rows per step and its variant.
struct BwdKernel {
  int block_m = 64;
  BwdVariant variant{};
  // Kernels of 128-row steps take plain scores only (softcap and ALiBi spill there): the general
  // score path is not built for them.
  // So do the kernels with rows on M (their softcap / ALiBi path is not built).
  constexpr bool takes(bool general_score) const { return (block_m == 64 && !variant.rows_on_m) || !general_score; }
  friend constexpr bool operator==(const BwdKernel&, const BwdKernel&) = default;
};

// d64: 128-row steps, as FlashAttention-3 (docs/PERF.md, twentieth session: +4 to +9 % over 64
// rows); with softcap or ALiBi 64-row steps where the warpgroups take turns computing a whole
// step's dQ (one bulk add per step). d256: 80 keys with the rows on M for plain scores (+2 to +7 %
// over 64 keys, twenty-sixth session; dQ in two 64-column slices, +3 to +4 % over four of 32,
// twenty-seventh); softcap and ALiBi on 64 keys, dQ's first slice issued before dV/dK, its adds
// overlapping them (eleventh session).
inline constexpr BwdKernel kBwdKernels64[] = {{128, {}}, {64, {.dq = BwdDq::Alternate}}};
inline constexpr BwdKernel kBwdKernels128[] = {{64, {}}};
inline constexpr BwdKernel kBwdKernels256[] = {{64, {.rows_on_m = true}}, {64, {.dq = BwdDq::Overlap}}};

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

// Whether a kernel of this head dim, block_m and variant is built for the score path.
constexpr bool bwd_kernel_built(int head_dim, int block_m, const BwdVariant& variant, bool general_score) {
  for (const BwdKernel& k : bwd_kernels_of(head_dim))
    if (k.block_m == block_m && k.variant == variant) return k.takes(general_score);
  return false;
}

// The first kernel of the head dim built for the score path (bwd_plan's choice); null if none.
constexpr const BwdKernel* bwd_first_kernel(int head_dim, bool general_score) {
  for (const BwdKernel& k : bwd_kernels_of(head_dim))
    if (k.takes(general_score)) return &k;
  return nullptr;
}

}  // namespace flashattn::fa3
