// The limits of a device that the FA2 plans choose tiles by. The struct and the rules are host
// code free of CUDA (the plans are unit-tested on the CPU); device_limits.cu reads them.
// Built with FLASHATTN_FA2_AS_SM80 (the CMake option of that name: the FA2 kernels compiled from
// compute_80, __CUDA_ARCH__ 800, into a newer GPU's code), a device's limits are
// capped at an A100's, so that a newer GPU runs what an sm80 one runs: its tiles on the host side,
// its code paths on the device side.
#pragma once

#include <algorithm>

#include "flashattn/flashattn.h"

namespace flashattn::fa2 {

// An A100's cudaDevAttrMaxSharedMemoryPerBlockOptin (163 KB; 164 KB per SM).
inline constexpr int kSm80SmemOptin = 163 * 1024;

struct DeviceLimits {
  int multiprocessors = 0;
  int smem_optin = 0;  // bytes of shared memory one block may opt into
  int arch = 0;        // compute capability as 10 * major + minor: 80, 86, 90
};

// What the FLASHATTN_FA2_AS_SM80 build makes of a device: an A100's shared memory and sm80's code.
inline DeviceLimits as_sm80_build(DeviceLimits limits) {
  limits.smem_optin = std::min(limits.smem_optin, kSm80SmemOptin);
  limits.arch = std::min(limits.arch, 80);
  return limits;
}

// The current device's limits, read from the runtime once per device (thread-safe) and served from
// that cache afterwards. `what` names the caller in errors.
Status device_limits(DeviceLimits* limits, const char* what);

// How many clusters of cluster_size CTAs of `kernel` (threads and dynamic shared memory per CTA
// as given) the current device holds at once (0: none, so a launch in such clusters would fail);
// the kernel's non-portable cluster size must be allowed first (sm90::allow_large_clusters) for
// more than 8. Asked once per (device, kernel, cluster size, threads, shared memory) and served
// from a cache afterwards (thread-safe): the query costs host time a decode step would otherwise
// pay per call.
Status cluster_capacity(const void* kernel, int cluster_size, int threads, int smem_bytes, int* clusters);

}  // namespace flashattn::fa2
