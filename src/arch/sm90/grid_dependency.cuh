// Programmatic dependent launch (PTX griddepcontrol, sm90+): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it in the
// stream still runs, once every CTA of that kernel has called launch_dependent_grids() or exited;
// it must call wait_on_prerequisite_grids() before touching what that kernel writes (the wait
// returns when the earlier kernel has completed and its writes are visible). Below sm90 both are
// no-ops and the launch attribute is not set (launches stay serialised).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "arch/sm90/launch_config.h"

namespace flashattn::sm90 {

// Lets the dependent grid launch once every CTA of this grid has called it (or exited). Safe at any
// point: the dependent's wait still covers the writes this grid makes after it.
__device__ __forceinline__ void launch_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Blocks until the grids this one depends on have completed and their memory is visible.
__device__ __forceinline__ void wait_on_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches `kernel` on `stream`, as a programmatic dependent of the kernel before it when
// `dependent` (sm90 devices: the caller knows the arch; the kernel must wait before it reads what
// that kernel writes, and before it writes what that kernel reads).
template <typename... Params, typename... Args>
cudaError_t launch_maybe_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                   cudaStream_t stream, bool dependent, Args&&... args) {
  const LaunchConfig launch(grid, block, smem_bytes, stream, 0, dependent);
  return cudaLaunchKernelEx(&launch.config, kernel, std::forward<Args>(args)...);
}

}  // namespace flashattn::sm90
