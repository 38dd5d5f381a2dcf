// The FA3 backward with a forced plan (fa3/bwd_plan.h), for tests and benchmarks only (not part of
// the public API): the kernel variants and CTA orders that bwd_plan never picks are reached here.
#pragma once

#include <optional>

#include "fa3/bwd_variants.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

// What a forced call changes in bwd_plan's choice for it; an unset field keeps the plan's.
struct Fa3BwdOverride {
  std::optional<fa3::BwdKernel> kernel;  // a kernel of fa3/bwd_variants.h
  std::optional<int> section_mb;         // fa3::BwdPlan::section_mb (set: section_per_wave off)
  std::optional<bool> section_per_wave;  // fa3::BwdPlan::section_per_wave
  std::optional<bool> tma_store_dkv;     // fa3::BwdPlan::tma_store_dkv
  std::optional<int> row_stagger;        // fa3::BwdPlan::row_stagger
};

// bwd(params) on the FA3 path (params.backend is not consulted) with bwd_plan's choice for the
// call changed as `change` says: validated as bwd validates; Unsupported when the FA3 backward does
// not cover the call, the kernel is not built at the call's head dim, or the build has no CUDA.
Status bwd_fa3_forced(const BwdParams& params, const Fa3BwdOverride& change);

}  // namespace flashattn::api
