// A bf16 GEMM on the sm90 primitive layer alone (TMA loads into a 4-stage mbarrier ring, wgmma
// from shared memory, a producer warpgroup and two consumer warpgroups with setmaxnreg): correct
// against a double-precision product, and at least 80 % of cuBLAS's rate on a large square GEMM,
// which shows the primitives are fast before attention is built on them. Skips without sm90.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "arch/sm80/mma.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tensor_map.h"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/warpgroup.cuh"
#include "arch/sm90/wgmma.cuh"
#include "gpu_test_util.h"

namespace flashattn::gpu_test {
namespace {

// C (M x N, row-major bf16) = A (M x K, row-major) B^T with B given as (N x K, row-major): both
// operands K-major. CTA tile 128 x 256, k step 64; each consumer warpgroup owns 64 rows.
constexpr int kGemmM = 128, kGemmN = 256, kGemmK = 64, kGemmStages = 4, kGemmThreads = 384;
// CTAs in groups of kGemmGroupM row tiles, row tile fastest, so that the CTAs running together
// share a few A and B strips in L2: rows-major order (all column tiles of a row tile, then the
// next) re-read every B strip from DRAM once per row tile, and on an H100's bandwidth that bound
// the GEMM at about 0.6 of cuBLAS (0.9 on an H200).
constexpr int kGemmGroupM = 8;
constexpr int kATileBytes = kGemmM * kGemmK * 2, kBTileBytes = kGemmN * kGemmK * 2;
constexpr int kGemmSmemBytes = kGemmStages * (kATileBytes + kBTileBytes) + 1024 /*barriers*/ + 1024 /*alignment*/;

__global__ void __launch_bounds__(kGemmThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, __nv_bfloat16* c,
                int n, int k) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* a_ring = smem;
  unsigned char* b_ring = smem + kGemmStages * kATileBytes;
  auto* pipe = reinterpret_cast<sm90::Pipeline<kGemmStages>*>(b_ring + kGemmStages * kBTileBytes);
  const int tiles_n = n / kGemmN, tiles_m = int(gridDim.x) / tiles_n;
  const int in_group = int(blockIdx.x) % (kGemmGroupM * tiles_n), first_m = int(blockIdx.x) / (kGemmGroupM * tiles_n) * kGemmGroupM;
  const int group_m = min(kGemmGroupM, tiles_m - first_m);  // the last group may hold fewer row tiles
  const int m0 = (first_m + in_group % group_m) * kGemmM, n0 = in_group / group_m * kGemmN;
  const int k_steps = k / kGemmK;
  const int warpgroup = threadIdx.x / 128, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) pipe->init(8);  // one release per consumer warp
  __syncthreads();

  if (warpgroup == 0) {
    sm90::warpgroup_registers_decrease<24>();
    if (threadIdx.x == 0) {
      sm90::PipelineState<kGemmStages> state;
      for (int ks = 0; ks < k_steps; ++ks, state.advance()) {
        pipe->producer_acquire(state, kATileBytes + kBTileBytes);
        sm90::tma_load_2d(a_ring + state.stage * kATileBytes, &map_a, ks * kGemmK, m0, &pipe->full[state.stage]);
        sm90::tma_load_2d(b_ring + state.stage * kBTileBytes, &map_b, ks * kGemmK, n0, &pipe->full[state.stage]);
      }
    }
    return;
  }

  sm90::warpgroup_registers_increase<240>();
  const int consumer = warpgroup - 1;
  float acc[kGemmN / 2];
#pragma unroll
  for (int i = 0; i < kGemmN / 2; ++i) acc[i] = 0.f;
  const uint32_t a_addr = sm90::smem_u32(a_ring) + consumer * 64 * 128, b_addr = sm90::smem_u32(b_ring);
  sm90::PipelineState<kGemmStages> state, previous;
  for (int ks = 0; ks < k_steps; ++ks) {
    pipe->consumer_wait(state);
    const uint32_t a_base = sm90::opaque_u32(a_addr + state.stage * kATileBytes);
    const uint32_t b_base = sm90::opaque_u32(b_addr + state.stage * kBTileBytes);
    sm90::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kGemmK / 16; ++j)  // k16 step j: 32 bytes along each 128-byte row
      sm90::Wgmma<__nv_bfloat16, kGemmN>::ss<0>(acc, sm90::kmajor_descriptor_at(a_base + 32 * j),
                                                sm90::kmajor_descriptor_at(b_base + 32 * j), 1);
    sm90::wgmma_commit();
    // Keep this step's wgmmas in flight; the previous step's are done, so its stage is free.
    sm90::wgmma_wait<1>();
    if (ks > 0) {
      __syncwarp();
      if (lane == 0) pipe->consumer_release(previous);
    }
    previous = state;
    state.advance();
  }
  sm90::wgmma_wait<0>();
  sm90::fence_accumulators(acc);
  // Accumulator 4i + e of warp w, lane l: row 16w + l/4 + 8(e/2), column 8i + 2(l%4) + e%2.
  const int warp = (threadIdx.x % 128) / 32;
  const int row = m0 + consumer * 64 + warp * 16 + lane / 4;
#pragma unroll
  for (int i = 0; i < kGemmN / 8; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = n0 + 8 * i + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(c + size_t(row + 8 * half) * n + col) =
          sm80::pack2<__nv_bfloat16>(acc[4 * i + 2 * half], acc[4 * i + 2 * half + 1]);
    }
#endif
}

// A row-major bf16 matrix with a 64-column x box_rows box in the 128-byte swizzle.
CUtensorMap gemm_map(const void* base, int rows, int cols, int box_rows) {
  sm90::TensorMapShape shape;
  shape.rank = 2;
  shape.sizes[0] = uint64_t(cols);
  shape.sizes[1] = uint64_t(rows);
  shape.strides_bytes[0] = uint64_t(cols) * 2;
  shape.box[0] = 64;
  shape.box[1] = uint32_t(box_rows);
  CUtensorMap map;
  const Status st = sm90::encode_tensor_map_sw128(&map, base, DType::BF16, shape);
  if (!st.ok()) throw CudaCallError(st.message());
  return map;
}

struct GemmBuffers {
  int m, n, k;
  DeviceArray<__nv_bfloat16> a, b, c;
  std::vector<__nv_bfloat16> host_a, host_b;
  GemmBuffers(int m_, int n_, int k_, uint64_t seed)
      : m(m_), n(n_), k(k_), a(size_t(m_) * k_), b(size_t(n_) * k_), c(size_t(m_) * n_), host_a(a.size()), host_b(b.size()) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist;
    for (auto& x : host_a) x = __float2bfloat16(dist(rng));
    for (auto& x : host_b) x = __float2bfloat16(dist(rng));
    a.upload(host_a);
    b.upload(host_b);
  }
};

void run_gemm(const GemmBuffers& g) {
  const CUtensorMap map_a = gemm_map(g.a.get(), g.m, g.k, kGemmM), map_b = gemm_map(g.b.get(), g.n, g.k, kGemmN);
  CUDA_CHECK(cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kGemmSmemBytes));
  gemm_kernel<<<unsigned((g.n / kGemmN) * (g.m / kGemmM)), kGemmThreads, kGemmSmemBytes>>>(map_a, map_b, g.c.get(), g.n, g.k);
  CUDA_CHECK(cudaGetLastError());
}

// Row-major C = A B^T through cuBLAS's column-major API: C^T (n x m) = B (as k x n, transposed) A^T.
void run_cublas(cublasHandle_t handle, const GemmBuffers& g) {
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, g.n, g.m, g.k, &alpha, g.b.get(), CUDA_R_16BF, g.k,
                                         g.a.get(), CUDA_R_16BF, g.k, &beta, g.c.get(), CUDA_R_16BF, g.n, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) throw CudaCallError("cublasGemmEx failed with status " + std::to_string(int(st)));
}

template <typename Launch>
double median_ms(Launch launch, int repeats) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();  // warm-up
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    launch();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

TEST(Sm90Gemm, MatchesDoubleProduct) {
  SKIP_WITHOUT_SM90();
  GemmBuffers g(1280, 512, 448, 7);  // 10 x 2 CTAs (a full group of 8 row tiles, then 2), 7 k steps: the ring wraps
  CUDA_CHECK(cudaMemset(g.c.get(), 0xff, g.c.bytes()));
  run_gemm(g);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> got = g.c.download();
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j) {
      double want = 0.0;
      for (int kk = 0; kk < g.k; ++kk)
        want += double(__bfloat162float(g.host_a[size_t(i) * g.k + kk])) * double(__bfloat162float(g.host_b[size_t(j) * g.k + kk]));
      const double err = std::fabs(double(__bfloat162float(got[size_t(i) * g.n + j])) - want);
      // One bf16 rounding of the result (2^-8 relative) plus fp32 accumulation over k terms.
      const double allowed = std::fabs(want) * 0x1p-8 + 1e-5 * g.k;
      ASSERT_LE(err, allowed) << "C[" << i << "][" << j << "] = " << __bfloat162float(got[size_t(i) * g.n + j]) << ", want "
                              << want;
    }
}

TEST(Sm90Gemm, ReachesEightyPercentOfCublas) {
  SKIP_WITHOUT_SM90();
  const int size = 8192;
  GemmBuffers g(size, size, size, 11);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const double flops = 2.0 * size * size * double(size);
  const double ours_ms = median_ms([&] { run_gemm(g); }, 10);
  const double cublas_ms = median_ms([&] { run_cublas(handle, g); }, 10);
  cublasDestroy(handle);
  const double ours = flops / ours_ms * 1e-9, theirs = flops / cublas_ms * 1e-9;
  std::printf("bf16 GEMM %d^3: ours %.1f TFLOP/s, cuBLAS %.1f TFLOP/s, ratio %.2f\n", size, ours, theirs, ours / theirs);
  EXPECT_GE(ours / theirs, 0.8) << "ours " << ours << " TFLOP/s, cuBLAS " << theirs << " TFLOP/s";
}

}  // namespace
}  // namespace flashattn::gpu_test
