// CUDA errors as flashattn Status values, and stream-ordered workspaces, for the GPU host code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/workspace_scope.h"
#include "cuda/workspace_pool.h"
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

// A stream-ordered device allocation for a call's scratch, freed on the same stream: no host
// synchronisation. It comes from the caller's WorkspaceAllocator where the call gave one
// (common/workspace_scope.h), else from the library's pool (cuda/workspace_pool.h). Freed when it
// goes out of scope, or by free() where the caller wants to know that the free was queued.
class StreamBuffer {
 public:
  static constexpr uintptr_t kWorkspaceAlignment = 256;  // as cudaMalloc's (TMA needs 16)
  StreamBuffer(cudaStream_t stream) : stream_(stream), allocator_(current_workspace_allocator()) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() { release(); }
  // `where` names the allocation (the free) in the error.
  Status allocate(size_t bytes, const char* where) {
    bytes = bytes < 16 ? 16 : bytes;
    if (allocator_ != nullptr) {
      data_ = allocator_->allocate(bytes, stream_, allocator_->context);
      if (data_ == nullptr)
        return Status::error(ErrorCode::CudaError, "",
                             std::string(where) + ": the workspace allocator gave no memory for " +
                                 std::to_string(bytes) + " bytes");
      if (reinterpret_cast<uintptr_t>(data_) % kWorkspaceAlignment != 0) {
        release();
        return Status::error(ErrorCode::InvalidArgument, "workspace",
                             std::string(where) + ": the workspace allocator's memory must be aligned to " +
                                 std::to_string(kWorkspaceAlignment) + " bytes");
      }
      return {};
    }
    cudaMemPool_t pool = nullptr;
    if (Status st = workspace_pool(stream_, &pool); !st.ok()) return st;
    // No pool while the stream is captured: the allocation becomes the graph's.
    return cuda_status(where, pool != nullptr ? cudaMallocFromPoolAsync(&data_, bytes, pool, stream_)
                                              : cudaMallocAsync(&data_, bytes, stream_));
  }
  Status free(const char* where) { return cuda_status(where, release()); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  cudaError_t release() {
    void* data = data_;
    data_ = nullptr;
    if (data == nullptr) return cudaSuccess;
    if (allocator_ != nullptr) {
      allocator_->release(data, stream_, allocator_->context);
      return cudaSuccess;
    }
    return cudaFreeAsync(data, stream_);
  }

  cudaStream_t stream_;
  const WorkspaceAllocator* allocator_;
  void* data_ = nullptr;
};

}  // namespace flashattn
