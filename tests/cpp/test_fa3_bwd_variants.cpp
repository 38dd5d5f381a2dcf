// The FA3 backward's kernels per head dim (src/fa3/bwd_variants.h, bwd_variant_names.h), host
// side: which are built, their names, that bwd_plan picks the head dim's, and the forced entry's
// answers before any kernel (api/fa3_bwd_forced.h).
#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <vector>

#include "api/fa3_bwd_forced.h"
#include "attention_case.h"
#include "fa3/bwd_variant_names.h"
#include "fa3/bwd_variants.h"
#if defined(FLASHATTN_WITH_CUDA)
#include "api/validate.h"
#include "fa3/fa3_backend.h"
#endif

namespace flashattn::test {
namespace {

std::vector<std::pair<int, fa3::BwdKernel>> built_kernels() {
  std::vector<std::pair<int, fa3::BwdKernel>> all;
  for (int d : {64, 128, 256})
    for (const fa3::BwdKernel& k : fa3::bwd_kernels_of(d)) all.push_back({d, k});
  return all;
}

TEST(Fa3BwdVariants, EveryBuiltKernelHasANameThatParsesBack) {
  for (const auto& [head_dim, kernel] : built_kernels()) {
    const std::string name = fa3::bwd_kernel_name(kernel);
    std::string why;
    const auto parsed = fa3::parse_bwd_kernel(name, &why);
    ASSERT_TRUE(parsed.has_value()) << name << ": " << why;
    EXPECT_TRUE(*parsed == kernel) << name;
    EXPECT_TRUE(fa3::bwd_kernel_built(head_dim, parsed->block_m, parsed->variant, false)) << name << " at d" << head_dim;
  }
  EXPECT_EQ(fa3::bwd_kernel_name(fa3::BwdKernel{}), "default");
  EXPECT_EQ(fa3::bwd_kernel_name(fa3::BwdKernel{128, {}}), "default@128");
}

TEST(Fa3BwdVariants, UnknownNamesAreRefused) {
  for (const char* bad : {"", "alternate", "dq-alternate+", "dq-alternate+dq-overlap", "evict-last", "regs240", "Default"}) {
    std::string why;
    EXPECT_FALSE(fa3::parse_bwd_kernel(bad, &why).has_value()) << "'" << bad << "'";
    EXPECT_NE(why.find("unknown FA3 backward variant"), std::string::npos) << "'" << bad << "': " << why;
  }
  for (const char* bad : {"default@64", "default@256", "default@", "dq-alternate@128x"}) {
    std::string why;
    EXPECT_FALSE(fa3::parse_bwd_kernel(bad, &why).has_value()) << "'" << bad << "'";
    EXPECT_NE(why.find("unknown FA3 backward rows per step"), std::string::npos) << "'" << bad << "': " << why;
  }
  std::string why;
  EXPECT_FALSE(fa3::parse_bwd_kernel("dq@128", &why).has_value());
  EXPECT_NE(why.find("unknown FA3 backward variant"), std::string::npos) << why;
}

// d64: 128-row steps for plain scores, the alternate dQ at 64 rows for softcap and ALiBi (and
// forced); d128 its own; d256 rows on M for plain scores, the overlapped dQ for softcap and ALiBi
// (and forced).
TEST(Fa3BwdVariants, KernelsPerHeadDimAndScorePath) {
  using fa3::BwdDq;
  for (bool general : {false, true}) {
    for (int d : {64, 128, 256}) {
      EXPECT_EQ(fa3::bwd_kernel_built(d, 64, {}, general), d == 128) << d;
      EXPECT_EQ(fa3::bwd_kernel_built(d, 128, {}, general), d == 64 && !general) << d;  // 128 rows: plain scores only
      EXPECT_EQ(fa3::bwd_kernel_built(d, 64, {.dq = BwdDq::Alternate}, general), d == 64) << d;
      EXPECT_EQ(fa3::bwd_kernel_built(d, 64, {.dq = BwdDq::Overlap}, general), d == 256) << d;
      EXPECT_EQ(fa3::bwd_kernel_built(d, 64, {.rows_on_m = true}, general), d == 256 && !general) << d;  // plain scores only
      const fa3::BwdKernel* first = fa3::bwd_first_kernel(d, general);
      ASSERT_NE(first, nullptr) << d;
      EXPECT_EQ(first->block_m, d == 64 && !general ? 128 : 64) << d;
      EXPECT_EQ(first->variant.rows_on_m, d == 256 && !general) << d;
    }
    EXPECT_FALSE(fa3::bwd_kernel_built(96, 64, {}, general));
    EXPECT_EQ(fa3::bwd_first_kernel(96, general), nullptr);
  }
  EXPECT_EQ(std::distance(fa3::bwd_kernels_of(64).begin(), fa3::bwd_kernels_of(64).end()), 2);
  EXPECT_EQ(std::distance(fa3::bwd_kernels_of(256).begin(), fa3::bwd_kernels_of(256).end()), 2);
  EXPECT_EQ(fa3::bwd_kernels_of(96).begin(), fa3::bwd_kernels_of(96).end());
}

// The forced entry validates the call first, and runs FA3 kernels only on CUDA tensors.
TEST(Fa3BwdVariants, ForcedEntryValidatesAndNeedsCudaTensors) {
  AttentionCase c;
  AttentionRun run(c);
  run.check_fwd(Backend::Cpu);
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  BwdParams params = run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa3);
  const fa3::BwdKernel alternate{64, {.dq = fa3::BwdDq::Alternate}};
  Status st = api::bwd_fa3_forced(params, {.kernel = alternate});
  EXPECT_EQ(st.code(), ErrorCode::Unsupported) << st.message();
  EXPECT_EQ(st.argument(), "backend") << st.message();
  params.dq = TensorView{};  // a rule of the API broken: refused before the device question
  st = api::bwd_fa3_forced(params, {.kernel = alternate});
  EXPECT_EQ(st.code(), ErrorCode::InvalidArgument) << st.message();
}

#if defined(FLASHATTN_WITH_CUDA)
// bwd_plan takes the head dim's first kernel for the call's score path, for every head dim and
// feature (d64 with plain scores: 128-row steps).
TEST(Fa3BwdVariants, PlanPicksTheHeadDimsKernel) {
  int covered = 0;
  for (const AttentionCase& c : feature_sweep()) {
    if (c.dtype == DType::F32 || c.fp8() || c.dropout_p > 0.f) continue;
    AttentionRun run(c);
    run.check_fwd(Backend::Cpu);  // out and lse for the backward's params
    HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
    BwdProblem problem;
    ASSERT_TRUE(api::make_bwd_problem(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa3), &problem).ok()) << c.name();
    if (!fa3::check_bwd(problem).ok()) continue;
    const fa3::BwdPlan plan = fa3::bwd_plan(problem);
    EXPECT_EQ(plan.block_m, plan.head_dim == 64 && !plan.general_score ? 128 : 64) << c.name();
    EXPECT_TRUE(plan.variant == fa3::bwd_first_kernel(plan.head_dim, plan.general_score)->variant) << c.name();
    EXPECT_TRUE(fa3::bwd_kernel_built(plan.head_dim, plan.block_m, plan.variant, plan.general_score)) << c.name();
    // Sections of section_mb order the deterministic mode's CTAs (docs/PERF.md, 2026-12-04);
    // sections of a wave the other calls under a limit on the right only (2026-12-06).
    const bool right_only = problem.fwd.mask.window_right >= 0 && problem.fwd.mask.window_left < 0;
    EXPECT_EQ(plan.section_mb > 0, problem.deterministic) << c.name();
    EXPECT_EQ(plan.section_per_wave, !problem.deterministic && right_only) << c.name();
    EXPECT_TRUE(plan.tma_store_dkv) << c.name();
    problem.deterministic = !problem.deterministic;
    EXPECT_EQ(fa3::bwd_plan(problem).section_mb > 0, problem.deterministic) << c.name();
    EXPECT_EQ(fa3::bwd_plan(problem).section_per_wave, !problem.deterministic && right_only) << c.name();
    ++covered;
  }
  EXPECT_GT(covered, 20);
}

// A forced plan's row_stagger: a power of two from 1 to 64, and 1 in deterministic mode.
TEST(Fa3BwdVariants, RowStaggerIsAPowerOfTwoAndOffInDeterministicMode) {
  AttentionCase c;
  c.head_dim = c.head_dim_v = 128;
  AttentionRun run(c);
  run.check_fwd(Backend::Cpu);
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  BwdProblem problem;
  ASSERT_TRUE(api::make_bwd_problem(run.bwd_params(dq.view(), dk.view(), dv.view(), Backend::Fa3), &problem).ok());
  ASSERT_TRUE(fa3::check_bwd(problem).ok());
  fa3::BwdPlan plan = fa3::bwd_plan(problem);
  for (int stagger : {1, 2, 4, 64}) {
    plan.row_stagger = stagger;
    EXPECT_TRUE(fa3::check_bwd_plan(plan, problem).ok()) << stagger;
  }
  for (int stagger : {0, -4, 3, 12, 128, 1 << 16}) {
    plan.row_stagger = stagger;
    const Status st = fa3::check_bwd_plan(plan, problem);
    EXPECT_EQ(st.code(), ErrorCode::InvalidArgument) << stagger;
    EXPECT_EQ(st.argument(), "plan") << stagger;
    EXPECT_NE(st.message().find("row_stagger must be a power of two"), std::string::npos) << st.message();
  }
  problem.deterministic = true;
  plan = fa3::bwd_plan(problem);
  EXPECT_EQ(plan.row_stagger, 1);
  EXPECT_TRUE(fa3::check_bwd_plan(plan, problem).ok());
  plan.row_stagger = 2;
  const Status st = fa3::check_bwd_plan(plan, problem);
  EXPECT_EQ(st.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(st.message().find("deterministic mode"), std::string::npos) << st.message();
}

// The plan staggers the row walks of d256 calls without a mask or the deterministic mode while a
// query head's Q, dO and dQ rows take at most 8 MiB (4k rows), and nothing else.
TEST(Fa3BwdVariants, PlanStaggersUnmaskedD256RowWalksUpTo4kRows) {
  auto stagger_of = [](int d, int64_t rows, bool causal, bool deterministic) {
    BwdProblem bp;
    bp.fwd.batch = 2;
    bp.fwd.heads_q = bp.fwd.heads_k = 8;
    bp.fwd.head_dim = bp.fwd.head_dim_v = d;
    bp.fwd.lens.seqlen_q = bp.fwd.lens.seqlen_k = rows;
    if (causal) bp.fwd.mask.window_right = 0;
    bp.deterministic = deterministic;
    return fa3::bwd_plan(bp).row_stagger;
  };
  for (int64_t rows : {1, 1024, 2048, 4096}) EXPECT_EQ(stagger_of(256, rows, false, false), 4) << rows;
  EXPECT_EQ(stagger_of(256, 4097, false, false), 1);
  EXPECT_EQ(stagger_of(256, 16384, false, false), 1);
  EXPECT_EQ(stagger_of(200, 4096, false, false), 4);  // d200 runs at 256, with its smaller rows
  EXPECT_EQ(stagger_of(256, 2048, true, false), 1);
  EXPECT_EQ(stagger_of(256, 2048, false, true), 1);
  for (int d : {64, 128}) EXPECT_EQ(stagger_of(d, 2048, false, false), 1) << d;
}

// The sections' size: groups (sequence x kv head) whose Q, dO and fp32 dQ rows fit, a power of two
// dividing the group count; none without section_mb or past 31-bit CTA positions.
// A d128 backward problem of batch x heads_q / heads_k (all the section size reads) and its plan.
void d128_section_case(int batch, int heads_q, int heads_k, BwdProblem* bp, fa3::BwdPlan* plan) {
  bp->fwd.batch = batch;
  bp->fwd.heads_q = heads_q;
  bp->fwd.heads_k = heads_k;
  bp->fwd.head_dim = bp->fwd.head_dim_v = 128;
  plan->head_dim = 128;
}

TEST(Fa3BwdVariants, SectionShiftFitsTheGroupsInTheBudget) {
  BwdProblem bp;
  AttnProblem& p = bp.fwd;
  fa3::BwdPlan plan;
  d128_section_case(8, 32, 8, &bp, &plan);
  plan.section_mb = 40;
  // A group: 4 query heads x 2048 rows x (2 x 2 x 128 + 4 x 128) bytes = 8 MiB: 5 fit, 4 divide 64.
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 2048, 16, 132), 2);
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 256, 2, 132), 5);     // 1 MiB a group: 40 fit, 32 of the 64
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 32768, 256, 132), 0);  // 128 MiB a group: one at a time
  p.batch = 3;                                                 // 24 groups: 8 divides them
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 256, 2, 132), 3);
  plan.section_mb = 0;
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 256, 2, 132), 0);
  plan.section_mb = 40;
  p.batch = 1 << 16;                                           // 2^19 groups x 2^12 key blocks
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 128, 1 << 12, 132), 0);
  plan.section_per_wave = true;
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 128, 1 << 12, 132), 0);
}

// Sections of a wave: the largest power of two of groups whose key blocks fit the SMs' CTAs and
// that divides the group count; section_mb, where set, decides instead.
TEST(Fa3BwdVariants, SectionShiftPerWaveFitsTheGroupsInTheSms) {
  BwdProblem bp;
  AttnProblem& p = bp.fwd;
  fa3::BwdPlan plan;
  d128_section_case(8, 16, 16, &bp, &plan);
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 2048, 16, 132), 0);  // off
  plan.section_per_wave = true;
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 2048, 16, 132), 3);   // 2k keys, 16 blocks: 8 groups
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 4096, 32, 132), 2);   // 4 groups
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 8192, 64, 132), 1);   // 2 groups
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 16384, 128, 132), 0);  // one block of each fits
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 2048, 16, 78), 2);    // fewer SMs: 4 groups
  plan.section_mb = 40;  // section_mb decides: 2 MiB a group, 20 fit, 16 divide the 128
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 2048, 16, 132), 4);
  plan.section_mb = 0;
  p.batch = 3;
  p.heads_q = p.heads_k = 2;  // 6 groups: 16 would fit, 2 divides them
  EXPECT_EQ(fa3::bwd_section_shift(bp, plan, 1024, 8, 132), 1);
}
#endif

}  // namespace
}  // namespace flashattn::test
