// Device tensors and events of the CUDA runner (included by cuda_runner.cpp only: it needs the
// CUDA runtime's headers).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "flashattn/flashattn.h"
#include "tensors.h"

namespace flashattn::bench {

inline Status cuda_status(cudaError_t err, const char* what) {
  return Status::error(ErrorCode::CudaError, "", std::string(what) + " failed: " + cudaGetErrorString(err));
}

#define BENCH_CUDA_TRY(expr)                                                 \
  do {                                                                       \
    const cudaError_t bench_err_ = (expr);                                   \
    if (bench_err_ != cudaSuccess) return cuda_status(bench_err_, #expr);    \
  } while (0)

// One device allocation with a host-side description of its shape. Its memset and copies run on
// the legacy default stream, which the runner's non-blocking stream does not wait for: call
// cudaDeviceSynchronize after creating a case's tensors.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (data_) cudaFree(data_);
  }

  // Allocates; seed != 0 fills with random normal values, seed == 0 with zeros. The values come
  // from a host block of at most kStagingBytes, repeated over the tensor by device copies that
  // double the filled prefix: a multi-GiB cache of the decode grid costs device copies instead of
  // host filling and a transfer, and repeated values change no kernel's time.
  Status create(DType dtype, std::initializer_list<int64_t> shape, int device, uint64_t seed) {
    view_ = TensorView::contiguous(nullptr, dtype, shape, DeviceType::Cuda, device);
    const std::size_t element = dtype_size(dtype), bytes = std::size_t(view_.numel()) * element;
    BENCH_CUDA_TRY(cudaMalloc(&data_, std::max<std::size_t>(bytes, 16)));
    view_.data = data_;
    if (seed == 0) {
      BENCH_CUDA_TRY(cudaMemset(data_, 0, bytes));
      return Status();
    }
    const int64_t block = std::min<int64_t>(view_.numel(), int64_t(kStagingBytes / element));
    const HostTensor staging(dtype, {block});
    fill_random_normal(staging.data(), dtype, block, seed);
    BENCH_CUDA_TRY(cudaMemcpy(data_, staging.data(), staging.bytes(), cudaMemcpyHostToDevice));
    auto* base = static_cast<uint8_t*>(data_);
    for (std::size_t filled = staging.bytes(); filled < bytes;) {
      const std::size_t n = std::min(filled, bytes - filled);
      BENCH_CUDA_TRY(cudaMemcpy(base + filled, base, n, cudaMemcpyDeviceToDevice));
      filled += n;
    }
    return Status();
  }

  // A device copy of a host tensor (block tables, cache lengths).
  Status upload(const HostTensor& host, int device) {
    BENCH_CUDA_TRY(cudaMalloc(&data_, std::max<std::size_t>(host.bytes(), 16)));
    BENCH_CUDA_TRY(cudaMemcpy(data_, host.data(), host.bytes(), cudaMemcpyHostToDevice));
    view_ = host.view();
    view_.data = data_;
    view_.device = DeviceType::Cuda;
    view_.device_index = device;
    return Status();
  }

  TensorView view() const { return view_; }  // undefined until created

 private:
  static constexpr std::size_t kStagingBytes = std::size_t(64) << 20;
  void* data_ = nullptr;
  TensorView view_;
};

class CudaEvent {
 public:
  CudaEvent() { error_ = cudaEventCreate(&event_); }
  ~CudaEvent() {
    if (error_ == cudaSuccess) cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }
  cudaError_t error() const { return error_; }

 private:
  cudaEvent_t event_{};
  cudaError_t error_;
};

}  // namespace flashattn::bench
