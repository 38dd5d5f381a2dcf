// Names of the FA3 backward's kernel variants (bwd_variants.h), for the benchmark's
// --fa3-bwd-variant and the GPU tests: "default", or features joined by '+':
//   dq-alternate  BwdDq::Alternate (d64)        dq-overlap  BwdDq::Overlap (d256)
//   evict-last    l2_evict_last                  regs240     consumer_registers 240
// Host only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fa3/bwd_variants.h"

namespace flashattn::fa3 {

// The kernel a name spells, or nullopt with *why naming the unknown feature. Whether it is built at
// a head dim is bwd_kernel_built's answer.
inline std::optional<BwdKernel> parse_bwd_kernel(std::string_view spec, std::string* why) {
  BwdKernel kernel;
  if (spec == "default") return kernel;
  while (true) {
    const size_t plus = spec.find('+');
    const std::string_view feature = spec.substr(0, plus);
    if (feature == "dq-alternate" && kernel.variant.dq == BwdDq::Default) kernel.variant.dq = BwdDq::Alternate;
    else if (feature == "dq-overlap" && kernel.variant.dq == BwdDq::Default) kernel.variant.dq = BwdDq::Overlap;
    else if (feature == "evict-last") kernel.variant.l2_evict_last = true;
    else if (feature == "regs240") kernel.variant.consumer_registers = 240;
    else {
      *why = "unknown FA3 backward variant '" + std::string(feature) +
             "' (default, or dq-alternate | dq-overlap, evict-last, regs240 joined by '+')";
      return std::nullopt;
    }
    if (plus == std::string_view::npos) return kernel;
    spec.remove_prefix(plus + 1);
  }
}

// The name parse_bwd_kernel reads back as `kernel`.
inline std::string bwd_kernel_name(const BwdKernel& kernel) {
  std::string name;
  auto add = [&](const char* feature) {
    if (!name.empty()) name += '+';
    name += feature;
  };
  if (kernel.variant.dq == BwdDq::Alternate) add("dq-alternate");
  if (kernel.variant.dq == BwdDq::Overlap) add("dq-overlap");
  if (kernel.variant.l2_evict_last) add("evict-last");
  if (kernel.variant.consumer_registers == 240) add("regs240");
  return name.empty() ? "default" : name;
}

}  // namespace flashattn::fa3
