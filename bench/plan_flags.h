// --fa2-fwd-plan, --fa2-bwd-plan, --fa3-fwd-plan, --fa3-bwd-plan: KEY=VALUE,... changes to the
// kernel plan the library picks per call (src/fa2/fwd_plan.h, src/fa2/bwd_plan.h,
// src/fa3/fwd_plan.h, src/fa3/bwd_plan.h), which the CUDA runner passes to the backend entries.
// Parsing and applying are host code, free of CUDA.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fa2/bwd_plan.h"
#include "fa2/fwd_plan.h"
#include "fa3/fp8_fwd_plan.h"
#include "fa3/fwd_plan.h"

namespace flashattn::bench {

enum class PlanFamily { Fa2Fwd, Fa2Bwd, Fa3Fwd, Fa3Bwd };

// The fields a flag may change, each an integer (0|1 for the flags among them).
struct PlanFlags {
  std::map<std::string, int> values;
  bool empty() const { return values.empty(); }
};

// The keys of a family's flag, in the order --help lists them.
const std::vector<std::string>& plan_flag_keys(PlanFamily family);
// "key=value,key=value"; nullopt with *error set on an unknown key, a value that is not an
// integer, a flag value other than 0 or 1, or a key given twice.
std::optional<PlanFlags> parse_plan_flags(PlanFamily family, const std::string& text, std::string* error);

// The plan with the flags' fields changed (fa2 forward: base=1 starts from fwd_base_plan's).
fa2::FwdPlan apply_plan_flags(const PlanFlags& flags, const fa2::FwdPlan& chosen, const fa2::FwdPlan& base);
fa2::BwdPlan apply_plan_flags(const PlanFlags& flags, fa2::BwdPlan plan);
fa3::FwdPlan apply_plan_flags(const PlanFlags& flags, fa3::FwdPlan plan);
// The fp8 forward takes --fa3-fwd-plan's block_n, consumers (block_m = 64 consumers), pingpong,
// tma_store and section_mb; a forced tile shape runs the tile's kernel that takes any mask.
fa3::Fp8FwdPlan apply_plan_flags(const PlanFlags& flags, fa3::Fp8FwdPlan plan);

}  // namespace flashattn::bench
