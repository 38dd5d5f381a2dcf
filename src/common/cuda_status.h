// CUDA errors as flashattn Status values, and stream-ordered workspaces, for the GPU host code.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashattn/flashattn.h"

namespace flashattn {

inline Status cuda_status(const char* where, cudaError_t err) {
  if (err == cudaSuccess) return {};
  return Status::error(ErrorCode::CudaError, "", std::string(where) + ": " + cudaGetErrorString(err));
}

#define FLASHATTN_CUDA_CHECK(where, expr)                                \
  do {                                                                   \
    const ::flashattn::Status st_ = ::flashattn::cuda_status(where, (expr)); \
    if (!st_.ok()) return st_;                                           \
  } while (0)

// A stream-ordered device allocation freed on the same stream: no host synchronisation. Freed
// when it goes out of scope, or by free() where the caller wants to know that the free was queued.
class StreamBuffer {
 public:
  StreamBuffer(cudaStream_t stream) : stream_(stream) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  // `where` names the allocation (the free) in the error.
  Status allocate(size_t bytes, const char* where) {
    return cuda_status(where, cudaMallocAsync(&data_, bytes < 16 ? 16 : bytes, stream_));
  }
  Status free(const char* where) {
    void* data = data_;
    data_ = nullptr;
    return data != nullptr ? cuda_status(where, cudaFreeAsync(data, stream_)) : Status{};
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

}  // namespace flashattn
