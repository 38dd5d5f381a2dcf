#include "plan_flags.h"

#include <algorithm>
#include <set>

namespace flashattn::bench {
namespace {

// Keys whose value is 0 or 1.
const std::set<std::string>& flag_keys() {
  static const std::set<std::string> keys{"base",    "stage_pages", "pack_gqa_queries", "split_in_cluster",
                                          "cluster_one_per_sm", "dq_bulk", "pingpong", "tma_store"};
  return keys;
}

std::optional<int> parse_value(const std::string& text) {
  try {
    size_t used = 0;
    const long value = std::stol(text, &used);
    if (used != text.size() || value < 0 || value > 1 << 20) return std::nullopt;
    return int(value);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

const std::vector<std::string>& plan_flag_keys(PlanFamily family) {
  static const std::vector<std::string> fa2_fwd{"base",        "block_m",          "block_n",         "warps",
                                                "stage_pages", "pack_gqa_queries", "split_in_cluster",
                                                "cluster_one_per_sm"};
  static const std::vector<std::string> fa2_bwd{"block_m", "key_tiles", "stages", "dq_bulk"};
  static const std::vector<std::string> fa3_fwd{"block_n", "consumers", "pingpong", "tma_store", "section_mb"};
  static const std::vector<std::string> fa3_bwd{"section_mb", "section_wave", "tma_store", "row_stagger"};
  switch (family) {
    case PlanFamily::Fa2Fwd: return fa2_fwd;
    case PlanFamily::Fa2Bwd: return fa2_bwd;
    case PlanFamily::Fa3Fwd: return fa3_fwd;
    case PlanFamily::Fa3Bwd: return fa3_bwd;
  }
  return fa2_fwd;
}

std::optional<PlanFlags> parse_plan_flags(PlanFamily family, const std::string& text, std::string* error) {
  const std::vector<std::string>& keys = plan_flag_keys(family);
  PlanFlags flags;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || std::find(keys.begin(), keys.end(), key) == keys.end()) {
      *error = "'" + item + "' is not KEY=VALUE with KEY one of " + joined(keys);
      return std::nullopt;
    }
    const std::optional<int> value = parse_value(item.substr(eq + 1));
    if (!value || (flag_keys().count(key) != 0 && *value > 1)) {
      *error = "invalid value in '" + item + "' (" + (flag_keys().count(key) != 0 ? "0 or 1" : "a count") + ")";
      return std::nullopt;
    }
    if (!flags.values.emplace(key, *value).second) {
      *error = "'" + key + "' given twice";
      return std::nullopt;
    }
    start = end + 1;
  }
  return flags;
}

fa2::FwdPlan apply_plan_flags(const PlanFlags& flags, const fa2::FwdPlan& chosen, const fa2::FwdPlan& base) {
  const auto& v = flags.values;
  fa2::FwdPlan plan = v.count("base") != 0 && v.at("base") == 1 ? base : chosen;
  if (const auto it = v.find("block_m"); it != v.end()) plan.block_m = it->second;
  if (const auto it = v.find("block_n"); it != v.end()) plan.block_n = it->second;
  if (const auto it = v.find("warps"); it != v.end()) plan.warps = it->second;
  if (const auto it = v.find("stage_pages"); it != v.end()) plan.stage_pages = it->second == 1;
  if (const auto it = v.find("pack_gqa_queries"); it != v.end()) plan.pack_gqa_queries = it->second == 1;
  if (const auto it = v.find("split_in_cluster"); it != v.end()) plan.split_in_cluster = it->second == 1;
  if (const auto it = v.find("cluster_one_per_sm"); it != v.end()) plan.cluster_one_per_sm = it->second == 1;
  return plan;
}

fa2::BwdPlan apply_plan_flags(const PlanFlags& flags, fa2::BwdPlan plan) {
  const auto& v = flags.values;
  if (const auto it = v.find("block_m"); it != v.end()) plan.block_m = it->second;
  if (const auto it = v.find("key_tiles"); it != v.end()) plan.key_tiles = it->second;
  if (const auto it = v.find("stages"); it != v.end()) plan.stages = it->second;
  if (const auto it = v.find("dq_bulk"); it != v.end()) plan.dq_bulk = it->second == 1;
  return plan;
}

fa3::FwdPlan apply_plan_flags(const PlanFlags& flags, fa3::FwdPlan plan) {
  const auto& v = flags.values;
  if (const auto it = v.find("block_n"); it != v.end()) plan.block_n = it->second;
  if (const auto it = v.find("consumers"); it != v.end()) plan.consumers = it->second;
  if (const auto it = v.find("pingpong"); it != v.end()) plan.pingpong = it->second == 1;
  if (const auto it = v.find("tma_store"); it != v.end()) plan.tma_store_o = it->second == 1;
  if (const auto it = v.find("section_mb"); it != v.end()) plan.section_mb = it->second;
  return plan;
}

fa3::Fp8FwdPlan apply_plan_flags(const PlanFlags& flags, fa3::Fp8FwdPlan plan) {
  const auto& v = flags.values;
  if (const auto it = v.find("block_n"); it != v.end()) plan.block_n = it->second;
  if (const auto it = v.find("consumers"); it != v.end()) plan.block_m = 64 * it->second;
  if (const auto it = v.find("tma_store"); it != v.end()) plan.tma_store_o = it->second == 1;
  if (const auto it = v.find("pingpong"); it != v.end()) plan.pingpong = it->second == 1;
  if (const auto it = v.find("section_mb"); it != v.end()) plan.section_mb = it->second;
  // A forced tile shape runs the tile's kernel that takes any mask (every tile has one).
  if (v.count("block_n") != 0 || v.count("consumers") != 0 || v.count("pingpong") != 0) plan.no_key_limits = false;
  return plan;
}

}  // namespace flashattn::bench
