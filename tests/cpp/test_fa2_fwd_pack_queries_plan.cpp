// The FA2 forward's plans that pack the query heads of a KV head into rows for any seqlen_q
// (FwdPlan::pack_gqa_queries, src/fa2/fwd_plan.h), host-only: fwd_plan never sets the field (it is
// reachable through forced plans only), the tiles of the packed plans, where packing pays, the
// checks of forced packed plans, and the row arithmetic (common/pack_gqa.h, fast_divmod.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>

#include "common/fast_divmod.h"
#include "common/pack_gqa.h"
#include "fa2/fwd_plan.h"
#include "plan_test_util.h"

namespace flashattn::fa2 {
namespace {

using test::causal;
using test::FailsWith;
using test::kA100;
using test::kH200;
using test::kSm86;
using test::paged;
using test::plan_call;
using test::varlen;
using test::windowed;
using test::with_alibi;
using test::with_dropout;
using test::with_softcap;

FwdPlan packed_tiles(int head_dim, int block_m, int block_n, bool general = false) {
  FwdPlan p;
  p.head_dim = head_dim;
  p.block_m = block_m;
  p.block_n = block_n;
  p.warps = 4;
  p.general_score = general;
  p.pack_gqa_queries = true;
  return p;
}

const DeviceLimits kDevices[] = {kH200, kA100, kSm86, test::h200_as_sm80_build()};

TEST(Fa2FwdPackQueriesPlan, DefaultPlansPackWhereItPays) {
  for (int d = 8; d <= 256; d += 8)
    for (int64_t sq : {1, 2, 4, 8, 16, 17})
      for (int64_t heads_k : {32, 8, 2, 1})
        for (const DeviceLimits& device : kDevices) {
          const AttnProblem base = plan_call(d, sq, 3000, 32, heads_k);
          for (const AttnProblem& call : {base, causal(base), with_softcap(base), with_alibi(base), paged(causal(base))}) {
            EXPECT_EQ(fwd_plan(call, device).pack_gqa_queries, pack_gqa_queries_pays(call) && call.plain_forward_scores())
                << test::describe(call);
            EXPECT_FALSE(fwd_plan_rows(call, device).pack_gqa_queries) << test::describe(call);
            EXPECT_FALSE(fwd_base_plan(call, device).pack_gqa_queries) << test::describe(call);
          }
        }
}

// Plain scores: the decode tiles (d256's base tiles where its decode ones do not fit); softcap and
// ALiBi: the base tiles; head dims padded to 64, 128 or 256.
TEST(Fa2FwdPackQueriesPlan, PackedTilesByHeadDimAndScorePath) {
  const std::tuple<int, FwdPlan, FwdPlan, FwdPlan> cases[] = {
      // d, plain on H200, plain on A100 / sm86, general everywhere
      {32, packed_tiles(64, 64, 64), packed_tiles(64, 64, 64), packed_tiles(64, 128, 64, true)},
      {64, packed_tiles(64, 64, 64), packed_tiles(64, 64, 64), packed_tiles(64, 128, 64, true)},
      {96, packed_tiles(128, 64, 64), packed_tiles(128, 64, 64), packed_tiles(128, 128, 32, true)},
      {128, packed_tiles(128, 64, 64), packed_tiles(128, 64, 64), packed_tiles(128, 128, 32, true)},
      {160, packed_tiles(256, 64, 64), packed_tiles(256, 64, 32), packed_tiles(256, 64, 32, true)},
      {256, packed_tiles(256, 64, 64), packed_tiles(256, 64, 32), packed_tiles(256, 64, 32, true)},
  };
  for (const auto& [d, plain_h200, plain_sm80, general] : cases)
    for (int64_t sq : {1, 4, 16})
      for (const DeviceLimits& device : kDevices) {
        const AttnProblem call = causal(plan_call(d, sq, 3000, 32, 8));
        const FwdPlan want = device.smem_optin >= kH200.smem_optin ? plain_h200 : plain_sm80;
        EXPECT_EQ(fwd_packed_queries_tiles(call, device), want) << test::describe(call) << ", sm" << device.arch;
        EXPECT_EQ(fwd_packed_queries_tiles(with_softcap(call), device), general) << test::describe(call);
        EXPECT_EQ(fwd_packed_queries_tiles(with_alibi(call), device), general) << test::describe(call);
        for (const AttnProblem& c : {call, with_softcap(call), with_alibi(windowed(call, 50, 0)), paged(call)})
          EXPECT_TRUE(check_fwd_plan(fwd_packed_queries_tiles(c, device), c, device).ok())
              << test::describe(c) << ", sm" << device.arch;
      }
  FwdPlan staged = packed_tiles(128, 64, 64);
  staged.stage_pages = true;
  EXPECT_EQ(fwd_packed_queries_tiles(paged(plan_call(128, 4, 3000, 32, 8)), kH200), staged);
  EXPECT_FALSE(fwd_packed_queries_tiles(paged(plan_call(256, 4, 3000, 32, 8)), kSm86).stage_pages);
}

// Every packed kernel has row-split tiles (the key-split decode tiles of kFwdKernels are not built
// packed), none is listed twice, and each is a plan some call takes.
TEST(Fa2FwdPackQueriesPlan, PackedKernelsAreListedOnce) {
  for (size_t i = 0; i < std::size(kFwdPackedQueryKernels); ++i) {
    const FwdKernelShape& k = kFwdPackedQueryKernels[i];
    EXPECT_FALSE(k.dropout);
    EXPECT_EQ(k.block_m % (16 * k.warps), 0) << "d" << k.head_dim << " " << k.block_m << "x" << k.block_n;
    for (size_t j = 0; j < i; ++j) {
      const FwdKernelShape& o = kFwdPackedQueryKernels[j];
      EXPECT_FALSE(o.head_dim == k.head_dim && o.block_m == k.block_m && o.block_n == k.block_n &&
                   o.general_score == k.general_score)
          << "listed twice: d" << k.head_dim;
    }
  }
}

TEST(Fa2FwdPackQueriesPlan, PaysForAFewTokensOfGqaInOneDecodeTile) {
  EXPECT_TRUE(pack_gqa_queries_pays(causal(plan_call(128, 4, 8192, 32, 8))));    // 16 rows
  EXPECT_TRUE(pack_gqa_queries_pays(causal(plan_call(128, 2, 8192, 32, 2))));    // 32 rows
  EXPECT_TRUE(pack_gqa_queries_pays(causal(plan_call(128, 4, 8192, 64, 4))));    // 64 rows
  EXPECT_TRUE(pack_gqa_queries_pays(with_alibi(plan_call(64, 8, 8192, 32, 8))));
  EXPECT_TRUE(pack_gqa_queries_pays(paged(plan_call(64, 8, 8192, 32, 8))));
  EXPECT_FALSE(pack_gqa_queries_pays(plan_call(128, 1, 8192, 32, 8)));           // one query: pack_gqa_rows
  EXPECT_FALSE(pack_gqa_queries_pays(causal(plan_call(128, 4, 8192, 8, 8))));    // MHA
  EXPECT_FALSE(pack_gqa_queries_pays(causal(plan_call(128, 5, 8192, 64, 4))));   // 80 rows
  EXPECT_FALSE(pack_gqa_queries_pays(varlen(plan_call(128, 4, 8192, 32, 8))));
  EXPECT_FALSE(pack_gqa_queries_pays(with_dropout(plan_call(128, 4, 8192, 32, 8))));
  for (const DeviceLimits& device : kDevices) {
    const AttnProblem pays = causal(plan_call(128, 4, 8192, 32, 8)), not_pays = causal(plan_call(128, 4, 8192, 8, 8));
    EXPECT_EQ(fwd_plan(pays, device), fwd_packed_queries_tiles(pays, device));
    EXPECT_EQ(fwd_plan(not_pays, device), fwd_plan_rows(not_pays, device));
    EXPECT_EQ(fwd_plan(plan_call(128, 1, 8192, 32, 8), device), fwd_plan_rows(plan_call(128, 1, 8192, 32, 8), device));
    EXPECT_EQ(fwd_plan(with_softcap(pays), device), fwd_plan_rows(with_softcap(pays), device));  // not timed packed
  }
}

TEST(Fa2FwdPackQueriesPlan, ForcedPackedPlansAreChecked) {
  const AttnProblem call = causal(plan_call(128, 4, 3000, 32, 8));
  const FwdPlan plan = packed_tiles(128, 64, 64);
  EXPECT_TRUE(check_fwd_plan(plan, call, kH200).ok());
  EXPECT_TRUE(check_fwd_plan(plan, plan_call(128, 4, 3000, 8, 8), kH200).ok());  // MHA: G = 1 packs nothing
  AttnProblem indexed_q = call;
  indexed_q.q.batch_index = test::kSomeIndices;
  AttnProblem paged_q = call;
  paged_q.q.block_table = test::kSomeIndices;
  for (const AttnProblem& c : {varlen(call), indexed_q, paged_q})
    EXPECT_TRUE(FailsWith(check_fwd_plan(plan, c, kH200), ErrorCode::InvalidArgument, "plan", "cannot pack them"))
        << test::describe(c);
  // Dropout: another score path first; a plan on the dropout path still cannot pack.
  FwdPlan dropout_plan = packed_tiles(128, 64, 32, true);
  dropout_plan.dropout = true;
  EXPECT_TRUE(FailsWith(check_fwd_plan(dropout_plan, with_dropout(call), kH200), ErrorCode::InvalidArgument, "plan",
                        "cannot pack them"));
  // Tiles with no packed twin (the plain base tiles of d128, d32's own).
  EXPECT_TRUE(FailsWith(check_fwd_plan(packed_tiles(128, 128, 32), call, kH200), ErrorCode::InvalidArgument, "plan",
                        "query heads packed into rows"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(packed_tiles(32, 128, 64), plan_call(32, 4, 3000, 32, 8), kH200),
                        ErrorCode::InvalidArgument, "plan", "names no built kernel"));
  // The 64 x 64 d128 tiles are built packed only (unpacked decoding runs the key-split 16 x 64).
  FwdPlan unpacked = plan;
  unpacked.pack_gqa_queries = false;
  EXPECT_TRUE(FailsWith(check_fwd_plan(unpacked, call, kH200), ErrorCode::InvalidArgument, "plan", "names no built kernel"));
  EXPECT_TRUE(FailsWith(check_fwd_plan(packed_tiles(256, 64, 64), plan_call(256, 4, 3000, 32, 8), kA100),
                        ErrorCode::Unsupported, "q", "bytes of shared memory per block"));
}

TEST(PackGqaQueries, RowsAndTheirDivisor) {
  const AttnProblem call = causal(plan_call(128, 5, 3000, 48, 8));
  ASSERT_TRUE(can_pack_gqa_queries(call));
  EXPECT_EQ(packed_query_rows(call), 30);
  const QueryRowPack pack = query_row_pack(call);
  EXPECT_EQ(pack.rows, 30);
  EXPECT_EQ(pack.group.divisor, 6);
  // Row t * G + g: token t, query head h_k * G + g; a row's token grows with the row.
  int last_token = 0;
  for (int row = 0; row < pack.rows; ++row) {
    int g = -1;
    const int t = pack.group.divmod(row, &g);
    EXPECT_EQ(t, row / 6);
    EXPECT_EQ(g, row % 6);
    EXPECT_GE(t, last_token);
    last_token = t;
  }
  EXPECT_FALSE(can_pack_gqa_queries(with_dropout(call)));
  EXPECT_FALSE(can_pack_gqa_queries(varlen(call)));
  EXPECT_TRUE(can_pack_gqa_queries(with_alibi(windowed(call, 10, 3))));
  EXPECT_TRUE(can_pack_gqa_queries(paged(call)));  // paged K/V, dense queries
  AttnProblem huge = call;
  huge.lens.seqlen_q = int64_t(1) << 28;  // 6 x 2^28 rows
  EXPECT_FALSE(can_pack_gqa_queries(huge));
}

TEST(FastDivmod, MatchesIntegerDivision) {
  std::mt19937 rng(5);
  for (int d = 1; d <= 5000; d += d < 100 ? 1 : 37) {
    const FastDivmod f(d);
    for (int n : {0, 1, d - 1, d, d + 1, 2 * d - 1, 0x3fffffff, 0x7ffffffe, 0x7fffffff}) {
      if (n < 0) continue;
      int rem = -1;
      ASSERT_EQ(f.divmod(n, &rem), n / d) << n << " / " << d;
      ASSERT_EQ(rem, n % d) << n << " % " << d;
    }
    for (int i = 0; i < 2000; ++i) {
      const int n = int(rng() & 0x7fffffffu);
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace flashattn::fa2
