// FA2 fwd_kvcache (append + rotary + paged/dense cache + split-KV) and the device combine against
// the naive reference. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "device_mirror.h"
#include "forced_plans.h"
#include "gpu_test_util.h"
#include "combine_case.h"
#include "kv_alone_case.h"
#include "kvcache_case.h"
#include "paged_varlen_case.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

std::vector<KvCase> gpu_kv_cases() {
  std::vector<KvCase> cases;
  for (const KvCase& c : kv_cases())
    if (c.dtype != DType::F32) cases.push_back(c);  // the FA2 kernels take fp16/bf16
  return cases;
}

class Fa2KvCache : public ::testing::TestWithParam<KvCase> {};

TEST_P(Fa2KvCache, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_kvcache_case(GetParam(), Backend::Fa2, gpu_test::kvcache_on_device);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2KvCache, ::testing::ValuesIn(gpu_kv_cases()), ParamTestName());

// The d256 cases on the base tiles (fa2::fwd_base_plan: sm80's), which sm90 and decoding leave.
class Fa2KvCacheBaseTiles : public ::testing::TestWithParam<KvCase> {};

TEST_P(Fa2KvCacheBaseTiles, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const gpu_test::Fa2FwdChoice base = gpu_test::checked(
      [](const AttnProblem& call, const fa2::DeviceLimits& limits) { return std::optional(fa2::fwd_base_plan(call, limits)); });
  check_kvcache_case(GetParam(), Backend::Fa2, gpu_test::on_device(gpu_test::fa2_kvcache_with(base)));
}

std::vector<KvCase> gpu_kv_d256_cases() {
  std::vector<KvCase> cases;
  for (const KvCase& c : gpu_kv_cases())
    if (c.head_dim > 224 || c.dv() > 224) cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2KvCacheBaseTiles, ::testing::ValuesIn(gpu_kv_d256_cases()), ParamTestName());

// The query heads of each KV head packed into the rows of its tiles for any seqlen_q
// (FwdPlan::pack_gqa_queries, fa2::fwd_packed_queries_tiles; forced only until it has run here):
// the KV-cache sweep, and speculative decoding's shapes (speculative_kv_cases, kvcache_case.h).
gpu_test::Fa2FwdChoice packed_query_heads() {
  return gpu_test::checked([](const AttnProblem& call, const fa2::DeviceLimits& limits) {
    return std::optional(fa2::fwd_packed_queries_tiles(call, limits));
  });
}

class Fa2KvCachePackedQueries : public ::testing::TestWithParam<KvCase> {};

TEST_P(Fa2KvCachePackedQueries, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_kvcache_case(GetParam(), Backend::Fa2, gpu_test::on_device(gpu_test::fa2_kvcache_with(packed_query_heads())));
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2KvCachePackedQueries, ::testing::ValuesIn(gpu_kv_cases()), ParamTestName());

INSTANTIATE_TEST_SUITE_P(Speculative, Fa2KvCachePackedQueries, ::testing::ValuesIn(speculative_kv_cases()), ParamTestName());

// The speculative shapes on the default plans too (their NaN past the cache included).
INSTANTIATE_TEST_SUITE_P(Speculative, Fa2KvCache, ::testing::ValuesIn(speculative_kv_cases()), ParamTestName());

// Split-KV in thread-block clusters (FwdPlan::split_in_cluster, sm90's decode tiles; forced on,
// paged caches included, which the default plans split through global memory): the KV-cache
// sweep, the speculative shapes, and caches of 32 key tiles split 2 to 16 ways and automatically,
// some splits without keys, ragged lengths, NaN past them, dense and paged, d64 and d128, GQA
// 1/4/8; 20 splits go through global memory; long caches whose automatic count the cap of 16 cuts.
gpu_test::Fa2FwdChoice splits_in_clusters() {
  return gpu_test::checked([](const AttnProblem& call, const fa2::DeviceLimits& limits) {
    fa2::FwdPlan plan = fa2::fwd_plan(call, limits);
    plan.split_in_cluster = true;
    return std::optional(plan);
  });
}

std::vector<KvCase> cluster_split_cases() {
  std::vector<KvCase> cases;
  int i = 0;
  for (int splits : {0, 2, 3, 7, 8, 11, 16, 20})
    for (int group : {1, 4, 8}) {
      KvCase c;
      c.batch = 2;
      c.heads_k = 2;
      c.heads_q = 2 * group;
      c.capacity = i % 3 == 0 ? 2048 : i % 3 == 1 ? 1500 : 90;  // 90: fewer key tiles than splits
      c.head_dim = i % 2 == 0 ? 128 : 64;
      c.num_splits = splits;
      c.page_size = i % 4 == 1 ? 16 : i % 4 == 3 ? 64 : 0;
      c.seqlen_new = i % 5 == 2 ? 1 : 0;
      c.nan_past_cache = true;
      c.dtype = i % 2 == 0 ? DType::BF16 : DType::F16;
      c.seed = 3000 + i;
      cases.push_back(c);
      ++i;
    }
  // Automatic counts above a cluster (long caches, few row blocks): the default plan's case on
  // sm90, the rule's count capped at 16.
  for (int capacity : {5000, 8192, 20000}) {
    KvCase c;
    c.batch = 2;  // sequence 0 empty (its slots poisoned), sequence 1 full
    c.heads_k = capacity == 8192 ? 2 : 1;
    c.heads_q = c.heads_k * (capacity == 5000 ? 1 : 4);
    c.capacity = capacity;
    c.head_dim = capacity == 20000 ? 64 : 128;
    c.seqlen_new = capacity == 8192 ? 1 : 0;
    c.nan_past_cache = true;
    c.dtype = DType::BF16;
    c.seed = 3100 + capacity;
    cases.push_back(c);
  }
  return cases;
}

// The call as a CUDA graph captured on a stream of its own, then run: *kernels counts the graph's
// kernel nodes (the cluster path launches no combine kernel after the forward).
gpu_test::DeviceKvCache captured(gpu_test::DeviceKvCache call, int* kernels) {
  return [call, kernels](const KvCacheParams& d) -> Status {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    KvCacheParams on_stream = d;
    on_stream.stream = stream;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    const Status st = call(on_stream);
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    *kernels = 0;
    size_t count = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    if (count > 0) CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      *kernels += type == cudaGraphNodeTypeKernel;
    }
    if (st.ok()) gpu_test::launch_graph_once(graph, stream);
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
    return st;
  };
}

class Fa2KvCacheClusterSplits : public ::testing::TestWithParam<KvCase> {};

TEST_P(Fa2KvCacheClusterSplits, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const KvCase& c = GetParam();
  int kernels = -1;
  check_kvcache_case(c, Backend::Fa2, gpu_test::on_device(captured(gpu_test::fa2_kvcache_with(splits_in_clusters()), &kernels)));
  // A forced count of 2..16 on sm90's decode tiles (one query, d64/d128, plain scores: the Splits
  // cases) runs in clusters: the forward alone, after the append kernel where keys are appended.
  const bool decode_tiles = c.seqlen_q == 1 && c.head_dim <= 128 && c.dv() <= 128 && c.softcap == 0.f && c.alibi == 0 &&
                            !c.softmax_scale && (c.dtype == DType::BF16 || c.dtype == DType::F16);
  if (gpu_test::fa2_limits().arch >= 90 && decode_tiles && c.num_splits >= 2 && c.num_splits <= fa2::kMaxClusterSplits)
    EXPECT_EQ(kernels, 1 + (c.seqlen_new > 0)) << "kernel launches of a call split in clusters";
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2KvCacheClusterSplits, ::testing::ValuesIn(gpu_kv_cases()), ParamTestName());
INSTANTIATE_TEST_SUITE_P(Speculative, Fa2KvCacheClusterSplits, ::testing::ValuesIn(speculative_kv_cases()), ParamTestName());
INSTANTIATE_TEST_SUITE_P(Splits, Fa2KvCacheClusterSplits, ::testing::ValuesIn(cluster_split_cases()), ParamTestName());

// Left-padded caches and varlen queries, each sequence checked alone (kv_alone_case.cpp).
std::vector<KvAloneCase> gpu_kv_alone_cases() {
  std::vector<KvAloneCase> cases;
  for (const KvAloneCase& c : kv_alone_cases())
    if (c.dtype != DType::F32) cases.push_back(c);
  return cases;
}

class Fa2KvCacheAlone : public ::testing::TestWithParam<KvAloneCase> {};

TEST_P(Fa2KvCacheAlone, MatchesEachSequenceAlone) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_kv_alone_case(GetParam(), Backend::Fa2, gpu_test::kvcache_on_device);
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2KvCacheAlone, ::testing::ValuesIn(gpu_kv_alone_cases()), ParamTestName());

// Varlen queries over a paged k/v in fwd (serving engines' mixed batches).
std::vector<PagedVarlenCase> gpu_paged_varlen_cases() {
  std::vector<PagedVarlenCase> cases;
  for (const PagedVarlenCase& c : paged_varlen_cases())
    if (c.attn.dtype != DType::F32) cases.push_back(c);
  return cases;
}

class Fa2PagedVarlen : public ::testing::TestWithParam<PagedVarlenCase> {};

TEST_P(Fa2PagedVarlen, MatchesPackedReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const PagedVarlenCase& c = GetParam();
  const FwdResult f = check_paged_varlen_case(c, Backend::Fa2, gpu_test::fwd_on_device);
  expect_within(f.out, 2.0, rounding_floor(c.attn.dtype, f.out.reference_max), "out");
  expect_within(f.lse, 2.0, rounding_floor(DType::F32, f.lse.reference_max) * 8, "lse");
}

INSTANTIATE_TEST_SUITE_P(Sweep, Fa2PagedVarlen, ::testing::ValuesIn(gpu_paged_varlen_cases()), ParamTestName());

}  // namespace
}  // namespace flashattn::test

namespace flashattn::test {
namespace {

TEST(Fa2Combine, DenseFloat32) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_combine(false, DType::F32, Backend::Fa2, gpu_test::combine_on_device);
}
TEST(Fa2Combine, DenseBf16) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_combine(false, DType::BF16, Backend::Fa2, gpu_test::combine_on_device);
}
TEST(Fa2Combine, VarlenFp16) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_combine(true, DType::F16, Backend::Fa2, gpu_test::combine_on_device);
}

}  // namespace
}  // namespace flashattn::test
