// TensorView helpers, dtype/backend names, Status, version: the small value types of the API.
#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn {

namespace {

// ndim outside [0, kMaxDims] marks a malformed view (see strided()); its shape is not read.
bool ndim_in_range(int ndim) { return ndim >= 0 && ndim <= kMaxDims; }

// Fills shape and strides from the lists; a list longer than kMaxDims leaves ndim at the list
// length (> kMaxDims), which validation reports instead of the library writing past the arrays.
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     DeviceType device, int device_index) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.device_index = device_index;
  view.ndim = int(shape.size());
  int d = 0;
  for (int64_t extent : shape) {
    if (d >= kMaxDims) break;
    view.shape[d++] = extent;
  }
  return view;
}

}  // namespace

int64_t TensorView::numel() const {
  if (!ndim_in_range(ndim)) return 0;
  if (ndim == 0) return 0;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] == 0) return 0;
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    // Saturates instead of overflowing: validation turns a huge count into an error.
    if (__builtin_mul_overflow(count, shape[d], &count)) return INT64_MAX;
  }
  return count;
}

bool TensorView::is_contiguous() const {
  if (!ndim_in_range(ndim)) return false;
  if (numel() == 0) return true;
  // Row-major, ignoring the strides of extent-1 dimensions (they never move the address).
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (stride[d] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;
  }
  return true;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  DeviceType device, int device_index) {
  TensorView view = make_view(data, dtype, shape, device, device_index);
  if (!ndim_in_range(view.ndim)) return view;
  int64_t stride = 1;
  for (int d = view.ndim - 1; d >= 0; --d) {
    view.stride[d] = stride;
    // Wrapping is harmless here: an overflowing shape is rejected by validation anyway.
    stride = int64_t(uint64_t(stride) * uint64_t(view.shape[d] > 0 ? view.shape[d] : 1));
  }
  return view;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, DeviceType device,
                               int device_index) {
  TensorView view = make_view(data, dtype, shape, device, device_index);
  if (strides.size() != shape.size()) {
    // No stride can be guessed for the missing dimensions: mark the view malformed (ndim -1).
    view.ndim = -1;
    return view;
  }
  int d = 0;
  for (int64_t s : strides) {
    if (d >= kMaxDims) break;
    view.stride[d++] = s;
  }
  return view;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::F8E4M3: return "float8_e4m3fn";
    case DType::I32: return "int32";
    case DType::U8: return "uint8";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F8E4M3: return 1;
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  return 0;
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::Auto: return "auto";
    case Backend::Cpu: return "cpu";
    case Backend::Fa2: return "fa2";
    case Backend::Fa3: return "fa3";
  }
  return "unknown";
}

Status Status::error(ErrorCode code, std::string argument, std::string message) {
  Status status;
  status.code_ = code;
  status.argument_ = std::move(argument);
  status.message_ = std::move(message);
  return status;
}

void Status::throw_if_error() const {
  if (!ok()) throw Error(*this);
}

const char* version() { return "0.1.0"; }

}  // namespace flashattn
