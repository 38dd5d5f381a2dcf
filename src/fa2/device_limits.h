// The limits of the current device that the FA2 launchers choose tiles by (host code).
// Built with FLASHATTN_FA2_AS_SM80 (CMake FLASHATTN_SM80_PTX: the FA2 kernels as compute_80 PTX,
// which the driver compiles for the GPU at hand with __CUDA_ARCH__ 800), the shared memory per
// block is capped at an A100's, so that a newer GPU runs what an sm80 one runs: its tiles on the
// host side, its code paths on the device side.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "common/cuda_status.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// An A100's cudaDevAttrMaxSharedMemoryPerBlockOptin (163 KB; 164 KB per SM).
inline constexpr int kSm80SmemOptin = 163 * 1024;

struct DeviceLimits {
  int multiprocessors = 0;
  int smem_optin = 0;  // bytes of shared memory one block may opt into
};

inline Status device_limits(DeviceLimits* limits, const char* what) {
  int device = 0;
  FLASHATTN_CUDA_CHECK(what, cudaGetDevice(&device));
  FLASHATTN_CUDA_CHECK(what, cudaDeviceGetAttribute(&limits->multiprocessors, cudaDevAttrMultiProcessorCount, device));
  FLASHATTN_CUDA_CHECK(what, cudaDeviceGetAttribute(&limits->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
#if defined(FLASHATTN_FA2_AS_SM80)
  limits->smem_optin = std::min(limits->smem_optin, kSm80SmemOptin);
#endif
  return {};
}

}  // namespace flashattn::fa2
