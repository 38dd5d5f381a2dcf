// Host side of TMA: encoding tensor maps (cuTensorMapEncodeTiled, reached through the runtime's
// driver entry point so the library needs no link against libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::sm90 {

// A tensor of up to 5 dimensions, innermost first: sizes in elements, strides in bytes for every
// dimension but the innermost (contiguous). The box is the tile one TMA load moves.
struct TensorMapShape {
  int rank = 0;
  uint64_t sizes[5] = {};
  uint64_t strides_bytes[4] = {};
  uint32_t box[5] = {};
};

// 16-bit elements (fp16/bf16), 128-byte swizzle (the box's inner extent must be 64 elements),
// out-of-bounds elements read as zero.
Status encode_tensor_map_sw128(CUtensorMap* map, const void* base, DType dtype, const TensorMapShape& shape);

// fp16/bf16 or fp8 e4m3 (moved as bytes) with a 128- or 64-byte swizzle: the box's inner extent
// is swizzle_bytes of elements; out-of-bounds elements read as zero.
Status encode_tensor_map(CUtensorMap* map, const void* base, DType dtype, const TensorMapShape& shape, int swizzle_bytes);

}  // namespace flashattn::sm90
