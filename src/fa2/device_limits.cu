// Reads a device's limits once and serves them from a per-device cache (fa2/device_limits.h).
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

#include "arch/sm90/cluster.cuh"
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

Status cluster_capacity(const void* kernel, int cluster_size, int threads, int smem_bytes, int* clusters) {
  const char* what = "fa2: asking the device for clusters";
  int device = 0;
  FLASHATTN_CUDA_CHECK(what, cudaGetDevice(&device));
  using Key = std::tuple<int, const void*, int, int, int>;
  const Key key{device, kernel, cluster_size, threads, smem_bytes};
  static std::mutex mutex;
  static std::map<Key, int> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find(key); it != cache.end()) {
      *clusters = it->second;
      return {};
    }
  }
  int count = 0;
  FLASHATTN_CUDA_CHECK(what, sm90::max_active_clusters(&count, kernel, dim3(unsigned(threads)), size_t(smem_bytes),
                                                       unsigned(cluster_size)));
  const std::lock_guard<std::mutex> lock(mutex);
  *clusters = cache.emplace(key, count).first->second;
  return {};
}

}  // namespace flashattn::fa2
