#include "fa3/launch_common.h"

#include <cuda_runtime.h>

#include <string>

#include "arch/sm90/tensor_map.h"

namespace flashattn::fa3 {

Status map_rows(CUtensorMap* map, const RowsView& view, DType dtype, int64_t dim, int64_t heads, int64_t seqlen, int64_t batch,
                uint32_t box_rows, int swizzle_bytes) {
  const uint64_t esize = dtype == DType::F8E4M3 ? 1 : 2;
  const bool varlen = view.cu_seqlens != nullptr;
  sm90::TensorMapShape shape;
  shape.rank = 4;
  shape.sizes[0] = uint64_t(dim);
  shape.sizes[1] = uint64_t(heads);
  shape.sizes[2] = uint64_t(seqlen);
  shape.sizes[3] = uint64_t(varlen ? 1 : batch);
  const uint64_t strides[3] = {uint64_t(view.head_stride) * esize, uint64_t(view.row_stride) * esize,
                               uint64_t(view.batch_stride) * esize};
  // A dimension of extent 1 is never stepped, but the encode wants every stride a multiple of 16
  // bytes and the caller's stride of such a dimension may be anything (varlen: the batch): it gets
  // the packed stride, the extent of the dimensions below it.
  uint64_t packed = uint64_t(dim) * esize;
  for (int d = 1; d < 4; ++d) {
    shape.strides_bytes[d - 1] = shape.sizes[d] == 1 ? (packed + 15) / 16 * 16 : strides[d - 1];
    packed = shape.strides_bytes[d - 1] * shape.sizes[d];
  }
  shape.box[0] = uint32_t(uint64_t(swizzle_bytes) / esize);
  shape.box[1] = 1;
  shape.box[2] = box_rows;
  shape.box[3] = 1;
  return sm90::encode_tensor_map(map, view.data, dtype, shape, swizzle_bytes);
}

int sm_count() {
  // A host-side attribute lookup (no driver round trip), cheap enough per launch.
  int device = 0, n = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      n <= 0)
    return 132;
  return n;
}

Status require_sm90(const char* what) {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return Status::error(ErrorCode::CudaError, "", std::string(what) + ": cannot read the device");
  if (major != 9) return Status::error(ErrorCode::Unsupported, "q", std::string(what) + ": needs an sm90 GPU");
  return {};
}

}  // namespace flashattn::fa3
