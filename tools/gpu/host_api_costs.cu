// Host time of each CUDA runtime call that one FA3 forward makes (the causal bf16 path:
// device lookups, the capture test of the workspace pool, the shared-memory attribute, four TMA
// descriptor encodes, the tile counter's allocation and zeroing, the launch), each timed on its own
// with the GPU kept busy, as in tools/gpu/host_overhead.py. Their sum against the extension's whole
// call (host_profile.py) says how much of that call is the runtime and how much is our code.
//
// usage (on the GPU machine):
//   nvcc -std=c++20 -O2 -arch=sm_90a -o /tmp/host_api_costs tools/gpu/host_api_costs.cu && /tmp/host_api_costs [calls]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

__global__ void busy(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void empty_kernel(int* sink) {
  if (sink != nullptr && threadIdx.x == 0) *sink = blockIdx.x;
}

__global__ void __cluster_dims__(1, 1, 1) empty_cluster_kernel(int* sink) {
  if (sink != nullptr && threadIdx.x == 0) *sink = blockIdx.x;
}

// Median microseconds of `calls` calls of fn, each timed alone, behind a kernel that keeps the GPU
// busy for all of them (so no call waits for the GPU, and none finds it idle).
double median_us(cudaStream_t stream, int calls, const std::function<void()>& fn) {
  busy<<<1, 1, 0, stream>>>(1'000'000'000LL);  // about 0.5 s at 1.98 GHz, far longer than the calls
  check(cudaGetLastError(), "busy launch");
  std::vector<double> us(calls);
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  check(cudaStreamSynchronize(stream), "synchronize");
  std::nth_element(us.begin(), us.begin() + calls / 2, us.end());
  return us[calls / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 200;
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  int device = 0;
  check(cudaGetDevice(&device), "device");

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = {cudaMemLocationTypeDevice, device};
  cudaMemPool_t pool;
  check(cudaMemPoolCreate(&pool, &props), "pool");
  uint64_t keep = uint64_t(64) << 20;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "pool threshold");

  void* encode_ptr = nullptr;
  cudaDriverEntryPointQueryResult found{};
  check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode_ptr, 12000, cudaEnableDefault, &found),
        "cuTensorMapEncodeTiled entry point");
  auto encode = reinterpret_cast<decltype(&cuTensorMapEncodeTiled)>(encode_ptr);
  void* tensor = nullptr;
  const cuuint64_t dims[4] = {128, 16384, 16, 1};  // (d, seqlen, heads, batch) of a bf16 q
  check(cudaMalloc(&tensor, 2 * dims[0] * dims[1] * dims[2]), "tensor");
  const cuuint64_t strides[3] = {2 * dims[0] * dims[2], 2 * dims[0], 2 * dims[0] * dims[1] * dims[2]};
  const cuuint32_t box[4] = {64, 128, 1, 1}, unit[4] = {1, 1, 1, 1};
  int* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(int)), "sink");
  constexpr int kSmem = 200 * 1024;
  check(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "smem");
  check(cudaFuncSetAttribute(empty_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "smem");

  struct Row {
    const char* name;
    std::function<void()> fn;
  };
  const std::vector<Row> rows = {
      {"cudaGetDevice + cudaDeviceGetAttribute", [&] {
         int d = 0, n = 0;
         cudaGetDevice(&d);
         cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d);
       }},
      {"cudaStreamIsCapturing", [&] {
         cudaStreamCaptureStatus status;
         cudaStreamIsCapturing(stream, &status);
       }},
      {"cudaFuncSetAttribute (max dynamic smem)",
       [&] { cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem); }},
      {"cuTensorMapEncodeTiled", [&] {
         CUtensorMap map;
         encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, tensor, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
       }},
      {"cudaMallocFromPoolAsync + cudaFreeAsync (4 B)", [&] {
         void* p = nullptr;
         cudaMallocFromPoolAsync(&p, 4, pool, stream);
         cudaFreeAsync(p, stream);
       }},
      {"cudaMemsetAsync (4 B)", [&] { cudaMemsetAsync(sink, 0, sizeof(int), stream); }},
      {"launch <<<132, 384, 200 KiB>>> + cudaGetLastError", [&] {
         empty_kernel<<<132, 384, kSmem, stream>>>(sink);
         cudaGetLastError();
       }},
      {"cudaLaunchKernelEx, cluster 1 + PDL", [&] {
         cudaLaunchAttribute attrs[1];
         attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
         attrs[0].val.programmaticStreamSerializationAllowed = 1;
         cudaLaunchConfig_t config{dim3(132), dim3(384), kSmem, stream, attrs, 1};
         cudaLaunchKernelEx(&config, empty_cluster_kernel, sink);
       }},
  };
  std::printf("median host us of %d calls each, GPU busy\n", calls);
  for (const Row& row : rows) {
    for (int i = 0; i < 5; ++i) row.fn();  // first-call costs out of the way
    check(cudaStreamSynchronize(stream), row.name);
    check(cudaGetLastError(), row.name);
    std::printf("%-50s %8.2f\n", row.name, median_us(stream, calls, row.fn));
  }
  check(cudaGetLastError(), "the calls");
  cudaFree(sink);
  cudaFree(tensor);
  cudaMemPoolDestroy(pool);
  cudaStreamDestroy(stream);
  return 0;
}
