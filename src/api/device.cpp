// device_info: what the CUDA runtime reports, or an empty description in a CPU-only build.
// Never aborts: a machine without a GPU or a driver simply has device_count = 0.
#include <vector>

#include "flashattn/flashattn.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace flashattn {

#if defined(FLASHATTN_WITH_CUDA)
namespace {

// The visible devices do not change during a process, so they are queried once: device_info is
// on the dispatch path (FA3 needs sm90) and cudaGetDeviceProperties is slow.
struct DeviceTable {
  int count = 0;
  std::vector<DeviceInfo> devices;
};

DeviceInfo describe(int device) {
  DeviceInfo info;
  info.cuda_built = true;
  info.device = device;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later runtime calls do not see it
    info.device = -1;
    return info;
  }
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.global_memory_bytes = prop.totalGlobalMem;
  info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  info.l2_bytes = std::size_t(prop.l2CacheSize);
  return info;
}

const DeviceTable& device_table() {
  static const DeviceTable table = [] {
    DeviceTable t;
    int count = 0;
    // No driver, an old driver or no device: the runtime returns an error code; count stays 0.
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 0) {
      cudaGetLastError();
      count = 0;
    }
    t.count = count;
    for (int d = 0; d < count; ++d) t.devices.push_back(describe(d));
    return t;
  }();
  return table;
}

}  // namespace

DeviceInfo device_info(int device) {
  const DeviceTable& table = device_table();
  DeviceInfo info;
  if (device >= 0 && device < table.count) info = table.devices[std::size_t(device)];
  info.cuda_built = true;
  info.device_count = table.count;
  return info;
}

#else

DeviceInfo device_info(int) {
  DeviceInfo info;  // cuda_built = false, device_count = 0, device = -1
  return info;
}

#endif

}  // namespace flashattn
