// Host: a kernel launch's configuration with the sm90 attributes the library uses — clusters of
// CTAs along x, and programmatic dependent launch (grid_dependency.cuh) — for cudaLaunchKernelEx
// and the cluster occupancy query (cluster.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace flashattn::sm90 {

struct LaunchConfig {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attributes[2]{};

  // cluster_x: CTAs per cluster along x (0: no clusters); dependent: a programmatic dependent of
  // the kernel before it in the stream.
  LaunchConfig(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, unsigned cluster_x, bool dependent) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = attributes;
    if (cluster_x > 0) {
      cudaLaunchAttribute& a = attributes[config.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = cluster_x;
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (dependent) {
      cudaLaunchAttribute& a = attributes[config.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;  // config.attrs points into this object
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

}  // namespace flashattn::sm90
