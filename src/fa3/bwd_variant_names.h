// Names of the FA3 backward's kernels (bwd_variants.h), for the benchmark's --fa3-bwd-variant and
// the tests: "default" (BwdDq::Default), "dq-alternate" (BwdDq::Alternate, built at d64),
// "dq-overlap" (BwdDq::Overlap, built at d256), "rows-on-m" (BwdVariant::rows_on_m, d256), with
// "@128" for 128-row steps ("default@128", built at d64). Host only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fa3/bwd_variants.h"

namespace flashattn::fa3 {

// The kernel a name spells, or nullopt with *why naming the unknown one: a variant, and after
// '@' the rows per step when not 64 ("default@128"). Whether it is built at a head dim is
// bwd_kernel_built's answer.
inline std::optional<BwdKernel> parse_bwd_kernel(std::string_view spec, std::string* why) {
  BwdKernel kernel;
  std::string_view variant = spec;
  if (const size_t at = spec.find('@'); at != std::string_view::npos) {
    variant = spec.substr(0, at);
    const std::string_view rows = spec.substr(at + 1);
    if (rows == "128") kernel.block_m = 128;
    else {
      *why = "unknown FA3 backward rows per step '" + std::string(rows) + "' in '" + std::string(spec) + "' (@128, or none for 64)";
      return std::nullopt;
    }
  }
  if (variant == "dq-alternate") kernel.variant.dq = BwdDq::Alternate;
  else if (variant == "dq-overlap") kernel.variant.dq = BwdDq::Overlap;
  else if (variant == "rows-on-m") kernel.variant.rows_on_m = true;
  else if (variant != "default") {
    *why = "unknown FA3 backward variant '" + std::string(spec) +
           "' (default, dq-alternate, dq-overlap or rows-on-m, with @128 for 128-row steps)";
    return std::nullopt;
  }
  return kernel;
}

// The name parse_bwd_kernel reads back as `kernel`.
inline std::string bwd_kernel_name(const BwdKernel& kernel) {
  std::string name = kernel.variant.rows_on_m              ? "rows-on-m"
                     : kernel.variant.dq == BwdDq::Alternate ? "dq-alternate"
                     : kernel.variant.dq == BwdDq::Overlap   ? "dq-overlap"
                                                             : "default";
  if (kernel.block_m != 64) name += "@" + std::to_string(kernel.block_m);
  return name;
}

}  // namespace flashattn::fa3
