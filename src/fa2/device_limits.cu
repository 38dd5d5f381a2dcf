// Reads a device's limits once and serves them from a per-device cache (fa2/device_limits.h).
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "common/cuda_status.h"
#include "fa2/device_limits.h"

namespace flashattn::fa2 {
namespace {

Status query_limits(int device, DeviceLimits* limits, const char* what) {
  int major = 0, minor = 0;
  FLASHATTN_CUDA_CHECK(what, cudaDeviceGetAttribute(&limits->multiprocessors, cudaDevAttrMultiProcessorCount, device));
  FLASHATTN_CUDA_CHECK(what, cudaDeviceGetAttribute(&limits->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  FLASHATTN_CUDA_CHECK(what, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FLASHATTN_CUDA_CHECK(what, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  limits->arch = 10 * major + minor;
#if defined(FLASHATTN_FA2_AS_SM80)
  *limits = as_sm80_build(*limits);
#endif
  return {};
}

}  // namespace

Status device_limits(DeviceLimits* limits, const char* what) {
  int device = 0;
  FLASHATTN_CUDA_CHECK(what, cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<int, DeviceLimits> cache;  // a failed query is not cached: the next call asks again
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find(device); it != cache.end()) {
      *limits = it->second;
      return {};
    }
  }
  DeviceLimits read;
  if (Status st = query_limits(device, &read, what); !st.ok()) return st;
  const std::lock_guard<std::mutex> lock(mutex);
  *limits = cache.emplace(device, read).first->second;
  return {};
}

}  // namespace flashattn::fa2
