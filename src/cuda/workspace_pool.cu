#include "cuda/workspace_pool.h"

#include <cstdint>
#include <map>
#include <mutex>

#include "common/cuda_status.h"

namespace flashattn {

namespace {

Status create_pool(int device, cudaMemPool_t* pool) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  FLASHATTN_CUDA_CHECK("workspace pool: creating it", cudaMemPoolCreate(pool, &props));
  uint64_t keep = kWorkspacePoolKeepBytes;
  if (Status st = cuda_status("workspace pool: setting its release threshold",
                              cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keep));
      !st.ok()) {
    cudaMemPoolDestroy(*pool);
    *pool = nullptr;
    return st;
  }
  return {};
}

}  // namespace

Status workspace_pool(cudaStream_t stream, cudaMemPool_t* pool) {
  *pool = nullptr;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FLASHATTN_CUDA_CHECK("workspace pool: asking whether the stream is being captured",
                       cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return {};
  int device = 0;
  FLASHATTN_CUDA_CHECK("workspace pool: reading the current device", cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;  // never destroyed: the driver frees them at exit
  std::lock_guard<std::mutex> lock(mutex);
  auto it = pools.find(device);
  if (it == pools.end()) {
    cudaMemPool_t created = nullptr;
    if (Status st = create_pool(device, &created); !st.ok()) return st;
    it = pools.emplace(device, created).first;
  }
  *pool = it->second;
  return {};
}

}  // namespace flashattn
