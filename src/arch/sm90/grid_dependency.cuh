// Programmatic dependent launch (PTX griddepcontrol, sm90+): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it in the
// stream still runs, once every CTA of that kernel has called launch_dependent_grids() or exited;
// it must call wait_on_prerequisite_grids() before touching what that kernel writes (the wait
// returns when the earlier kernel has completed and its writes are visible). Below sm90 both are
// no-ops and the launch attribute is not set (launches stay serialised).
#pragma once

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

}  // namespace flashattn::sm90
