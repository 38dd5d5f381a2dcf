// CUDA errors as flashattn Status values, for the FA2 host code.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

inline Status cuda_status(const char* where, cudaError_t err) {
  if (err == cudaSuccess) return {};
  return Status::error(ErrorCode::CudaError, "", std::string(where) + ": " + cudaGetErrorString(err));
}

#define FA2_CUDA_CHECK(where, expr)                                   \
  do {                                                                \
    const ::flashattn::Status st_ = ::flashattn::fa2::cuda_status(where, (expr)); \
    if (!st_.ok()) return st_;                                        \
  } while (0)

// A stream-ordered device allocation freed on the same stream: no host synchronisation.
class StreamBuffer {
 public:
  StreamBuffer(cudaStream_t stream) : stream_(stream) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  Status allocate(size_t bytes) {
    return cuda_status("fa2: allocating workspace", cudaMallocAsync(&data_, bytes < 16 ? 16 : bytes, stream_));
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

}  // namespace flashattn::fa2
