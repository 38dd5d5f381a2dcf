// Helpers for the GPU tests: checked CUDA calls, device presence, and device buffers that are
// poisoned before every kernel writes them.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashattn::gpu_test {

// A failed CUDA call throws; GoogleTest reports the exception as a failure of the running test
// (and this works inside helpers and constructors, where ASSERT_* cannot return).
class CudaCallError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw CudaCallError(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                      cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

#define CUDA_CHECK(expr) ::flashattn::gpu_test::check_cuda((expr), #expr, __FILE__, __LINE__)

// After a <<<...>>> launch: the launch error, then any error raised while the kernel ran.
#define CUDA_CHECK_LAUNCH()                  \
  do {                                       \
    CUDA_CHECK(cudaGetLastError());          \
    CUDA_CHECK(cudaDeviceSynchronize());     \
  } while (0)

// True when a CUDA device is usable; otherwise *why says what the runtime answered.
inline bool cuda_device_present(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so that it does not surface in a later check
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" +
           cudaGetErrorString(err) + ")";
    return false;
  }
  if (count == 0) {
    *why = "cudaGetDeviceCount returned 0 devices";
    return false;
  }
  return true;
}

// First statement of every GPU test.
#define SKIP_WITHOUT_CUDA_DEVICE()                                         \
  do {                                                                     \
    std::string no_device_reason_;                                         \
    if (!::flashattn::gpu_test::cuda_device_present(&no_device_reason_))  \
      GTEST_SKIP() << "no CUDA device: " << no_device_reason_;             \
  } while (0)

// A device array of T with host transfers.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    CUDA_CHECK(cudaMalloc(&data_, bytes() > 0 ? bytes() : 1));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw std::invalid_argument("DeviceArray::upload: size mismatch");
    CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with a pattern no kernel here produces on purpose, so an element the kernel
  // forgot to write shows up as a mismatch.
  void poison() { CUDA_CHECK(cudaMemset(data_, 0xA5, bytes())); }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// Instantiates a captured graph, runs it once on stream, waits for it and destroys the instance
// (the graph itself stays the caller's).
inline void launch_graph_once(cudaGraph_t graph, cudaStream_t stream) {
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

// Blocks for a 1-D grid-stride launch over n elements.
inline unsigned grid_for(std::size_t n, unsigned block = 256) {
  const std::size_t blocks = (n + block - 1) / block;
  return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

// True when device 0 is an sm90 (Hopper) GPU: the FA3 path and the sm90 primitives need one.
inline bool sm90_device_present(std::string* why) {
  if (!cuda_device_present(why)) return false;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    *why = std::string("needs sm90, the device is sm") + std::to_string(prop.major) + std::to_string(prop.minor);
    return false;
  }
  return true;
}

#define SKIP_WITHOUT_SM90()                                                  \
  do {                                                                       \
    std::string no_sm90_reason_;                                             \
    if (!::flashattn::gpu_test::sm90_device_present(&no_sm90_reason_))      \
      GTEST_SKIP() << "no sm90 device: " << no_sm90_reason_;                 \
  } while (0)

}  // namespace flashattn::gpu_test
