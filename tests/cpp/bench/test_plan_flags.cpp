// The benchmark's plan flags (bench/plan_flags.cpp, --fa2-fwd-plan / --fa2-bwd-plan /
// --fa3-fwd-plan): parsing, refusals, and the fields they change.
#include <gtest/gtest.h>

#include <string>

#include "plan_flags.h"

namespace flashattn::bench {
namespace {

PlanFlags parsed(PlanFamily family, const std::string& text) {
  std::string error;
  const auto flags = parse_plan_flags(family, text, &error);
  EXPECT_TRUE(flags.has_value()) << text << ": " << error;
  return flags.value_or(PlanFlags{});
}

std::string refusal(PlanFamily family, const std::string& text) {
  std::string error;
  EXPECT_FALSE(parse_plan_flags(family, text, &error).has_value()) << text;
  return error;
}

TEST(BenchPlanFlags, ParsesKeyValueLists) {
  const PlanFlags f = parsed(PlanFamily::Fa3Fwd, "pingpong=0,block_n=144");
  EXPECT_EQ(f.values.size(), 2u);
  EXPECT_EQ(f.values.at("pingpong"), 0);
  EXPECT_EQ(f.values.at("block_n"), 144);
  EXPECT_EQ(parsed(PlanFamily::Fa2Fwd, "base=1").values.at("base"), 1);
  EXPECT_EQ(parsed(PlanFamily::Fa2Bwd, "key_tiles=1,dq_bulk=1").values.at("key_tiles"), 1);
}

TEST(BenchPlanFlags, RefusesWhatNoPlanHas) {
  EXPECT_NE(refusal(PlanFamily::Fa3Fwd, "pingpong=2").find("0 or 1"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa3Fwd, "key_tiles=1").find("pingpong"), std::string::npos);  // lists the keys
  EXPECT_NE(refusal(PlanFamily::Fa2Bwd, "block_m").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa2Bwd, "block_m=x").find("invalid value"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa2Bwd, "block_m=64,block_m=128").find("twice"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa2Fwd, "").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa2Fwd, "warps=4,").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa2Fwd, "warps=-4").find("invalid value"), std::string::npos);
}

TEST(BenchPlanFlags, ChangeOnlyTheirFields) {
  fa2::FwdPlan chosen{256, 128, 64, 8}, base{256, 64, 32, 4};
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "base=1"), chosen, base), base);
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "base=0,block_m=64"), chosen, base), (fa2::FwdPlan{256, 64, 64, 8}));
  fa2::FwdPlan staged = base;
  staged.stage_pages = true;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "base=1,stage_pages=1"), chosen, base), staged);

  const fa2::BwdPlan bwd{128, 64, 2, 2};
  fa2::BwdPlan one_tile = bwd;
  one_tile.key_tiles = 1;
  one_tile.dq_bulk = true;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Bwd, "key_tiles=1,dq_bulk=1"), bwd), one_tile);

  fa3::FwdPlan fwd3;
  fwd3.head_dim = fwd3.head_dim_v = 128;
  fwd3.block_n = 176;
  fwd3.pingpong = true;
  fwd3.tma_store_o = true;
  fa3::FwdPlan want = fwd3;
  want.block_n = 144;
  want.pingpong = false;
  want.section_mb = 32;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa3Fwd, "pingpong=0,block_n=144,section_mb=32"), fwd3), want);
  want = fwd3;
  want.tma_store_o = false;
  want.consumers = 3;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa3Fwd, "tma_store=0,consumers=3"), fwd3), want);
}

TEST(BenchPlanFlags, PackGqaQueriesSetsItsField) {
  const fa2::FwdPlan chosen{128, 64, 64, 4}, base{128, 128, 32, 4};
  fa2::FwdPlan packed = chosen;
  packed.pack_gqa_queries = true;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "pack_gqa_queries=1"), chosen, base), packed);
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "pack_gqa_queries=0"), chosen, base), chosen);
  fa2::FwdPlan clustered = chosen;
  clustered.split_in_cluster = true;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "split_in_cluster=1"), chosen, base), clustered);
  EXPECT_NE(refusal(PlanFamily::Fa2Fwd, "split_in_cluster=3").find("0 or 1"), std::string::npos);
  fa2::FwdPlan shared_sms = clustered;
  shared_sms.cluster_one_per_sm = false;
  EXPECT_EQ(apply_plan_flags(parsed(PlanFamily::Fa2Fwd, "split_in_cluster=1,cluster_one_per_sm=0"), chosen, base), shared_sms);
  EXPECT_NE(refusal(PlanFamily::Fa2Fwd, "pack_gqa_queries=2").find("0 or 1"), std::string::npos);
  EXPECT_NE(refusal(PlanFamily::Fa2Bwd, "pack_gqa_queries=1").find("KEY=VALUE"), std::string::npos);
}

}  // namespace
}  // namespace flashattn::bench
