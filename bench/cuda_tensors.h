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

// One device allocation with a host-side description of its shape.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (data_) cudaFree(data_);
  }

  // Allocates (and, when seed != 0, fills with random normal values through a host staging copy).
  Status create(DType dtype, std::initializer_list<int64_t> shape, int device, uint64_t seed) {
    const HostTensor staging(dtype, shape);
    BENCH_CUDA_TRY(cudaMalloc(&data_, std::max<std::size_t>(staging.bytes(), 16)));
    if (seed != 0) {
      fill_random_normal(staging.data(), dtype, staging.numel(), seed);
      BENCH_CUDA_TRY(cudaMemcpy(data_, staging.data(), staging.bytes(), cudaMemcpyHostToDevice));
    } else {
      BENCH_CUDA_TRY(cudaMemset(data_, 0, staging.bytes()));
    }
    view_ = TensorView::contiguous(data_, dtype, shape, DeviceType::Cuda, device);
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
