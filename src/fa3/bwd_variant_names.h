// Names of the FA3 backward's kernel variants (bwd_variants.h), for the benchmark's
// --fa3-bwd-variant and the tests: "default" (BwdDq::Default), "dq-alternate" (BwdDq::Alternate,
// built at d64) or "dq-overlap" (BwdDq::Overlap, built at d256). Host only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fa3/bwd_variants.h"

namespace flashattn::fa3 {

// The kernel a name spells, or nullopt with *why naming the unknown one. Whether it is built at
// a head dim is bwd_kernel_built's answer.
inline std::optional<BwdKernel> parse_bwd_kernel(std::string_view spec, std::string* why) {
  BwdKernel kernel;
  if (spec == "default") return kernel;
  if (spec == "dq-alternate") kernel.variant.dq = BwdDq::Alternate;
  else if (spec == "dq-overlap") kernel.variant.dq = BwdDq::Overlap;
  else {
    *why = "unknown FA3 backward variant '" + std::string(spec) + "' (default, dq-alternate or dq-overlap)";
    return std::nullopt;
  }
  return kernel;
}

// The name parse_bwd_kernel reads back as `kernel`.
inline std::string bwd_kernel_name(const BwdKernel& kernel) {
  switch (kernel.variant.dq) {
    case BwdDq::Alternate: return "dq-alternate";
    case BwdDq::Overlap: return "dq-overlap";
    default: return "default";
  }
}

}  // namespace flashattn::fa3
