#include "arch/sm90/tensor_map.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

namespace flashattn::sm90 {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_function(Status* status) {
  static EncodeTiled fn = nullptr;
  static Status lookup;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult result{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &result);
    if (err != cudaSuccess || result != cudaDriverEntryPointSuccess || ptr == nullptr)
      lookup = Status::error(ErrorCode::CudaError, "",
                             std::string("TMA: cuTensorMapEncodeTiled is not available from the driver: ") +
                                 cudaGetErrorString(err));
    else
      fn = reinterpret_cast<EncodeTiled>(ptr);
  });
  *status = lookup;
  return fn;
}

}  // namespace

Status encode_tensor_map_sw128(CUtensorMap* map, const void* base, DType dtype, const TensorMapShape& shape) {
  if (dtype != DType::F16 && dtype != DType::BF16)
    return Status::error(ErrorCode::Unsupported, "", "TMA: only 16-bit element tensor maps are built here");
  return encode_tensor_map(map, base, dtype, shape, 128);
}

Status encode_tensor_map(CUtensorMap* map, const void* base, DType dtype, const TensorMapShape& shape, int swizzle_bytes) {
  Status status;
  const EncodeTiled encode = encode_function(&status);
  if (encode == nullptr) return status;
  CUtensorMapDataType type;
  switch (dtype) {
    case DType::F16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case DType::BF16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    case DType::F8E4M3: type = CU_TENSOR_MAP_DATA_TYPE_UINT8; break;  // moved as bytes
    default: return Status::error(ErrorCode::Unsupported, "", "TMA: tensor maps of fp16, bf16 or fp8 e4m3 only");
  }
  if (swizzle_bytes != 128 && swizzle_bytes != 64)
    return Status::error(ErrorCode::Unsupported, "", "TMA: a 128- or 64-byte swizzle only");
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode(map, type, cuuint32_t(shape.rank), const_cast<void*>(base), shape.sizes, shape.strides_bytes, shape.box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::error(ErrorCode::CudaError, "", "TMA: cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)));
  return {};
}

}  // namespace flashattn::sm90
