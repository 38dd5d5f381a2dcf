// The FA3 backward kernels built beside each head dim's default (bwd_plan.h): bwd_hdim*_variants.cu
// instantiate exactly these, in both element types and both score paths; fa3::bwd refuses a
// forced plan that names another. Host and device.
#pragma once

#include "fa3/bwd_plan.h"

namespace flashattn::fa3 {

// A kernel beside the head dim: its rows per step and its variant.
struct BwdKernel {
  int block_m = 64;
  BwdVariant variant{};
  friend constexpr bool operator==(const BwdKernel&, const BwdKernel&) = default;
};

inline constexpr BwdKernel kBwdVariants64[] = {
    {64, {.dq = BwdDq::Alternate}},
    {64, {.l2_evict_last = true}},
    {64, {.dq = BwdDq::Alternate, .l2_evict_last = true}},
    {64, {.consumer_registers = 240}},
    {64, {.dq = BwdDq::Alternate, .consumer_registers = 240}},
};
inline constexpr BwdKernel kBwdVariants128[] = {
    {64, {.l2_evict_last = true}},
    {64, {.consumer_registers = 240}},
};
inline constexpr BwdKernel kBwdVariants256[] = {
    {64, {.dq = BwdDq::Overlap}},
    {64, {.l2_evict_last = true}},
    {64, {.dq = BwdDq::Overlap, .l2_evict_last = true}},
    {64, {.consumer_registers = 240}},
    {64, {.dq = BwdDq::Overlap, .consumer_registers = 240}},
};

// The variants built at a head dim (64, 128 or 256; else none), as a range.
struct BwdKernelList {
  const BwdKernel* first = nullptr;
  const BwdKernel* last = nullptr;
  constexpr const BwdKernel* begin() const { return first; }
  constexpr const BwdKernel* end() const { return last; }
};
constexpr BwdKernelList bwd_variants_of(int head_dim) {
  auto of = [](const auto& list) { return BwdKernelList{list, list + sizeof(list) / sizeof(list[0])}; };
  return head_dim == 64 ? of(kBwdVariants64) : head_dim == 128 ? of(kBwdVariants128) : head_dim == 256 ? of(kBwdVariants256) : BwdKernelList{};
}

// Whether a kernel of this head dim, block_m and variant is built: the default (64 rows, no
// variant) or one of the lists above.
constexpr bool bwd_kernel_built(int head_dim, int block_m, const BwdVariant& variant) {
  if (block_m == 64 && variant == BwdVariant{}) return head_dim == 64 || head_dim == 128 || head_dim == 256;
  for (const BwdKernel& k : bwd_variants_of(head_dim))
    if (k.block_m == block_m && k.variant == variant) return true;
  return false;
}

}  // namespace flashattn::fa3
