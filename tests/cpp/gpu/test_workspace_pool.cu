// The GPU calls' scratch memory. The library's pool (cuda/workspace_pool.h): one pool per device
// for every stream on it, memory kept mapped across a synchronisation up to its threshold, the
// device's default pool left as it was, StreamBuffer allocations that come from it and go back to
// it, and none while a stream is captured (the graph owns what is allocated then). A caller's
// WorkspaceAllocator: every scratch allocation of a call goes through it and comes back, with the
// results those of the pool's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_bf16.h>

#include "common/cuda_status.h"
#include "cuda/workspace_pool.h"
#include "flashattn/flashattn.h"
#include "gpu/gpu_test_util.h"

namespace flashattn {
namespace {

using gpu_test::DeviceArray;

uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute) {
  uint64_t value = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

// A stream of the test's own and the library's pool for it.
class WorkspacePoolOnStream : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA_DEVICE();
    CUDA_CHECK(cudaStreamCreate(&stream));
    ASSERT_TRUE(workspace_pool(stream, &pool).ok());
    ASSERT_NE(pool, nullptr);
  }
  void TearDown() override {
    if (stream != nullptr) CUDA_CHECK(cudaStreamDestroy(stream));
  }

  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;
};

TEST_F(WorkspacePoolOnStream, OnePoolPerDeviceForEveryStream) {
  cudaMemPool_t on_default_stream = nullptr;
  ASSERT_TRUE(workspace_pool(nullptr, &on_default_stream).ok());
  EXPECT_EQ(pool, on_default_stream);
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t default_pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&default_pool, device));
  EXPECT_NE(pool, default_pool) << "the library must not allocate from (or retune) the default pool";
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReleaseThreshold), kWorkspacePoolKeepBytes);
}

TEST_F(WorkspacePoolOnStream, KeepsWorkspacesMappedAcrossASynchronisation) {
  const size_t bytes = size_t(8) << 20;  // under the threshold
  {
    StreamBuffer buffer(stream);
    ASSERT_TRUE(buffer.allocate(bytes, "test").ok());
    CUDA_CHECK(cudaMemsetAsync(buffer.as<char>(), 0x5a, bytes, stream));
    EXPECT_GE(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), bytes);
    ASSERT_TRUE(buffer.free("test").ok());
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  // Freed and synchronised: nothing in use, the memory still reserved for the next call.
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  const uint64_t reserved = pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, bytes);
  {
    StreamBuffer again(stream);
    ASSERT_TRUE(again.allocate(bytes, "test").ok());
    EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), reserved) << "the kept memory was not reused";
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

TEST_F(WorkspacePoolOnStream, ReleasesWhatExceedsTheThreshold) {
  {
    StreamBuffer large(stream);
    ASSERT_TRUE(large.allocate(4 * kWorkspacePoolKeepBytes, "test").ok());
    EXPECT_GE(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), 4 * kWorkspacePoolKeepBytes);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_LE(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), kWorkspacePoolKeepBytes);
}

TEST(WorkspacePool, NoPoolWhileCapturing) {
  SKIP_WITHOUT_CUDA_DEVICE();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaMemPool_t pool = reinterpret_cast<cudaMemPool_t>(1);
  const Status asked = workspace_pool(stream, &pool);
  Status allocated, freed;
  {
    StreamBuffer buffer(stream);
    allocated = buffer.allocate(size_t(1) << 20, "test");
    if (allocated.ok()) CUDA_CHECK(cudaMemsetAsync(buffer.as<char>(), 0, size_t(1) << 20, stream));
    freed = buffer.free("test");
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  EXPECT_TRUE(asked.ok()) << asked.message();
  EXPECT_EQ(pool, nullptr);
  EXPECT_TRUE(allocated.ok()) << allocated.message();
  EXPECT_TRUE(freed.ok()) << freed.message();
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  gpu_test::launch_graph_once(graph, stream);
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// A caller's allocator over the CUDA default pool that counts what it hands out.
struct CountingAllocator {
  int allocations = 0, releases = 0;
  std::size_t bytes = 0;

  static void* allocate(std::size_t n, void* stream, void* self) {
    auto* counter = static_cast<CountingAllocator*>(self);
    void* data = nullptr;
    if (cudaMallocAsync(&data, n, static_cast<cudaStream_t>(stream)) != cudaSuccess) return nullptr;
    ++counter->allocations;
    counter->bytes += n;
    return data;
  }
  static void release(void* data, void* stream, void* self) {
    ++static_cast<CountingAllocator*>(self)->releases;
    cudaFreeAsync(data, static_cast<cudaStream_t>(stream));
  }
  WorkspaceAllocator allocator() { return {&CountingAllocator::allocate, &CountingAllocator::release, this}; }
};

std::vector<__nv_bfloat16> random_bf16(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<__nv_bfloat16> v(n);
  for (auto& x : v) x = __float2bfloat16(normal(rng));
  return v;
}

TensorView device_view(const void* data, std::initializer_list<int64_t> shape, DType dtype = DType::BF16) {
  return TensorView::contiguous(const_cast<void*>(data), dtype, shape, DeviceType::Cuda, 0);
}

// A split-KV forward (scratch: the partials, unless the splits run in one cluster) and a
// deterministic backward (scratch: the dQ accumulator, row statistics and semaphores), each with
// the library's pool and with a caller's allocator: the caller's allocator serves every
// allocation, gets each back, and the results are bit-identical.
TEST(WorkspaceAllocatorCalls, ServeEveryScratchAllocation) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t batch = 2, seqlen = 300, heads = 4, dim = 64;
  const std::size_t n = std::size_t(batch * seqlen * heads * dim);
  DeviceArray<__nv_bfloat16> q(random_bf16(n, 1)), k(random_bf16(n, 2)), v(random_bf16(n, 3)),
      dout(random_bf16(n, 4));
  DeviceArray<__nv_bfloat16> out_pool(n), out_caller(n), dq_pool(n), dq_caller(n), dk_pool(n), dk_caller(n),
      dv_pool(n), dv_caller(n);
  DeviceArray<float> lse_pool(std::size_t(batch * heads * seqlen)), lse_caller(std::size_t(batch * heads * seqlen));
  CountingAllocator counter;

  auto forward = [&](DeviceArray<__nv_bfloat16>& out, DeviceArray<float>& lse, const WorkspaceAllocator& workspace) {
    FwdParams p;
    p.q = device_view(q.get(), {batch, seqlen, heads, dim});
    p.k = device_view(k.get(), {batch, seqlen, heads, dim});
    p.v = device_view(v.get(), {batch, seqlen, heads, dim});
    p.out = device_view(out.get(), {batch, seqlen, heads, dim});
    p.softmax_lse = device_view(lse.get(), {batch, heads, seqlen}, DType::F32);
    p.causal = true;
    p.num_splits = 3;
    p.backend = Backend::Fa2;
    p.workspace = workspace;
    return fwd(p);
  };
  auto backward = [&](DeviceArray<__nv_bfloat16>& out, DeviceArray<float>& lse, DeviceArray<__nv_bfloat16>& dq,
                      DeviceArray<__nv_bfloat16>& dk, DeviceArray<__nv_bfloat16>& dv,
                      const WorkspaceAllocator& workspace) {
    BwdParams p;
    p.q = device_view(q.get(), {batch, seqlen, heads, dim});
    p.k = device_view(k.get(), {batch, seqlen, heads, dim});
    p.v = device_view(v.get(), {batch, seqlen, heads, dim});
    p.out = device_view(out.get(), {batch, seqlen, heads, dim});
    p.dout = device_view(dout.get(), {batch, seqlen, heads, dim});
    p.softmax_lse = device_view(lse.get(), {batch, heads, seqlen}, DType::F32);
    p.dq = device_view(dq.get(), {batch, seqlen, heads, dim});
    p.dk = device_view(dk.get(), {batch, seqlen, heads, dim});
    p.dv = device_view(dv.get(), {batch, seqlen, heads, dim});
    p.causal = true;
    p.deterministic = true;
    p.workspace = workspace;
    return bwd(p);
  };

  const Status fwd_pool = forward(out_pool, lse_pool, {});
  if (fwd_pool.code() == ErrorCode::Unsupported) GTEST_SKIP() << fwd_pool.message();
  ASSERT_TRUE(fwd_pool.ok()) << fwd_pool.message();
  const Status fwd_caller = forward(out_caller, lse_caller, counter.allocator());
  ASSERT_TRUE(fwd_caller.ok()) << fwd_caller.message();
  CUDA_CHECK(cudaDeviceSynchronize());
  // (On sm90 forced splits up to a cluster's size run in clusters, without partials.)
  EXPECT_EQ(counter.releases, counter.allocations);
  const int forward_allocations = counter.allocations;

  const Status bwd_pool = backward(out_pool, lse_pool, dq_pool, dk_pool, dv_pool, {});
  ASSERT_TRUE(bwd_pool.ok()) << bwd_pool.message();
  const Status bwd_caller = backward(out_pool, lse_pool, dq_caller, dk_caller, dv_caller, counter.allocator());
  ASSERT_TRUE(bwd_caller.ok()) << bwd_caller.message();
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_GT(counter.allocations, forward_allocations) << "the backward's scratch did not come from the caller";
  EXPECT_EQ(counter.releases, counter.allocations);

  auto same_bits = [](const auto& a, const auto& b) {
    const auto x = a.download(), y = b.download();
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  EXPECT_TRUE(same_bits(out_pool, out_caller));
  EXPECT_TRUE(same_bits(lse_pool, lse_caller));
  EXPECT_TRUE(same_bits(dq_pool, dq_caller));
  EXPECT_TRUE(same_bits(dk_pool, dk_caller));
  EXPECT_TRUE(same_bits(dv_pool, dv_caller));
}

TEST(WorkspaceAllocatorCalls, NoMemoryFromTheCallerIsAnError) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // A backward always needs scratch; it fails before any kernel runs, so the inputs' values do
  // not matter.
  const int64_t batch = 1, seqlen = 256, heads = 2, dim = 64;
  const std::size_t n = std::size_t(batch * seqlen * heads * dim);
  DeviceArray<__nv_bfloat16> x(random_bf16(n, 5)), dq(n), dk(n), dv(n);
  DeviceArray<float> lse(std::size_t(batch * heads * seqlen));
  BwdParams p;
  p.q = p.k = p.v = p.out = p.dout = device_view(x.get(), {batch, seqlen, heads, dim});
  p.softmax_lse = device_view(lse.get(), {batch, heads, seqlen}, DType::F32);
  p.dq = device_view(dq.get(), {batch, seqlen, heads, dim});
  p.dk = device_view(dk.get(), {batch, seqlen, heads, dim});
  p.dv = device_view(dv.get(), {batch, seqlen, heads, dim});
  p.workspace = {[](std::size_t, void*, void*) -> void* { return nullptr; }, [](void*, void*, void*) {}, nullptr};
  const Status st = bwd(p);
  if (st.code() == ErrorCode::Unsupported) GTEST_SKIP() << st.message();
  EXPECT_EQ(st.code(), ErrorCode::CudaError) << st.message();
  EXPECT_NE(st.message().find("the workspace allocator gave no memory"), std::string::npos) << st.message();
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashattn
