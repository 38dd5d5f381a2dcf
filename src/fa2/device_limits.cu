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

// *out = cache[key], asking query(&value) on a miss and keeping its answer (a failed query is not
// cached: the next call asks again). Thread-safe through `mutex`; the query runs unlocked.
template <typename Key, typename Value, typename Query>
Status cached(std::mutex& mutex, std::map<Key, Value>& cache, const Key& key, Value* out, Query query) {
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find(key); it != cache.end()) {
      *out = it->second;
      return {};
    }
  }
  Value read{};
  if (Status st = query(&read); !st.ok()) return st;
  const std::lock_guard<std::mutex> lock(mutex);
  *out = cache.emplace(key, read).first->second;
  return {};
}

}  // namespace

Status device_limits(DeviceLimits* limits, const char* what) {
  int device = 0;
  FLASHATTN_CUDA_CHECK(what, cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<int, DeviceLimits> cache;
  return cached(mutex, cache, device, limits, [&](DeviceLimits* read) { return query_limits(device, read, what); });
}

Status cluster_capacity(const void* kernel, int cluster_size, int threads, int smem_bytes, int* clusters) {
  const char* what = "fa2: asking the device for clusters";
  int device = 0;
  FLASHATTN_CUDA_CHECK(what, cudaGetDevice(&device));
  using Key = std::tuple<int, const void*, int, int, int>;
  const Key key{device, kernel, cluster_size, threads, smem_bytes};
  static std::mutex mutex;
  static std::map<Key, int> cache;
  return cached(mutex, cache, key, clusters, [&](int* count) -> Status {
    FLASHATTN_CUDA_CHECK(what, sm90::max_active_clusters(count, kernel, dim3(unsigned(threads)), size_t(smem_bytes),
                                                         unsigned(cluster_size)));
    return {};
  });
}

}  // namespace flashattn::fa2
