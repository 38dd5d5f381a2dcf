#include "api/rules.h"

#include <algorithm>
#include <climits>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/int_div.h"

namespace flashattn::api {

namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string list_string(const int64_t* values, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

int64_t element_size(const TensorView& t) { return int64_t(dtype_size(t.dtype)); }

const int32_t* int_data(const TensorView& t) { return static_cast<const int32_t*>(t.data); }

// Half-open byte range [begin, end) spanned by a well-formed view with elements.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
};

// Largest element offset reached by the view, in elements (well-formed: no overflow).
int64_t max_element_offset(const TensorView& t) {
  int64_t offset = 0;
  for (int d = 0; d < t.ndim; ++d) offset += (t.shape[d] - 1) * t.stride[d];
  return offset;
}

ByteRange byte_range(const TensorView& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  const auto bytes = uintptr_t((max_element_offset(t) + 1) * element_size(t));
  return {begin, begin + bytes};
}

// One dimension of a view measured in bytes, for the aliasing tests.
struct ByteDim {
  int64_t stride, extent;
};

// The view as a set of bytes: each dimension with its byte stride, plus the bytes inside one
// element (stride 1, extent = element size); extent-1 dimensions dropped, sorted by stride.
std::vector<ByteDim> byte_dims(const TensorView& t) {
  std::vector<ByteDim> dims;
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] > 1) dims.push_back({t.stride[d] * element_size(t), t.shape[d]});
  if (element_size(t) > 1) dims.push_back({1, element_size(t)});
  std::sort(dims.begin(), dims.end(), [](const ByteDim& a, const ByteDim& b) { return a.stride < b.stride; });
  return dims;
}

// Each stride exceeds the largest offset the smaller dimensions reach: then every element has
// its own address (a sufficient condition; it rejects a few exotic interleavings too).
bool strides_nested(const std::vector<ByteDim>& dims) {
  int64_t reach = 0;
  for (const ByteDim& d : dims) {
    if (d.stride <= reach) return false;
    reach += (d.extent - 1) * d.stride;
  }
  return true;
}

// One device: the same type, and for CUDA the same index (a host tensor's index means nothing).
bool same_device(const TensorView& a, const TensorView& b) {
  return a.device == b.device && (a.device == DeviceType::Cpu || a.device_index == b.device_index);
}

// Whether delta = sum_k j_k * stride_k with |j_k| < extent_k over dims[0..level]: i.e. whether
// the view and its copy shifted by delta bytes share a byte. With nested strides at most two
// j's fit per level, so the search visits at most 2^levels paths.
bool difference_representable(const std::vector<ByteDim>& dims, int level, int64_t delta) {
  if (level < 0) return delta == 0;
  int64_t reach_below = 0;
  for (int k = 0; k < level; ++k) reach_below += (dims[size_t(k)].extent - 1) * dims[size_t(k)].stride;
  const ByteDim& d = dims[size_t(level)];
  const int64_t lo = std::max(ceil_div(delta - reach_below, d.stride), -(d.extent - 1));
  const int64_t hi = std::min(floor_div(delta + reach_below, d.stride), d.extent - 1);
  for (int64_t j = lo; j <= hi; ++j)
    if (difference_representable(dims, level - 1, delta - j * d.stride)) return true;
  return false;
}

bool same_layout(const TensorView& a, const TensorView& b) {
  if (a.ndim != b.ndim || element_size(a) != element_size(b)) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.stride[d] != b.stride[d])) return false;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Errors and printing
// ---------------------------------------------------------------------------------------------
Status invalid_argument(std::string_view argument, std::string_view rule, std::string_view got) {
  std::string message = "argument " + quoted(argument) + ": " + std::string(rule) + ", got " + std::string(got);
  return Status::error(ErrorCode::InvalidArgument, std::string(argument), std::move(message));
}

Status unsupported(std::string_view argument, std::string_view reason) {
  std::string message = "argument " + quoted(argument) + ": " + std::string(reason);
  return Status::error(ErrorCode::Unsupported, std::string(argument), std::move(message));
}

std::string shape_string(const TensorView& t) {
  return list_string(t.shape, std::clamp(t.ndim, 0, kMaxDims));
}

std::string strides_string(const TensorView& t) {
  return list_string(t.stride, std::clamp(t.ndim, 0, kMaxDims));
}

std::string device_string(DeviceType device, int index) {
  switch (device) {
    case DeviceType::Cpu: return "cpu";
    case DeviceType::Cuda: return "cuda:" + std::to_string(index);
  }
  return "device type " + std::to_string(int(device));
}

std::string device_string(const TensorView& t) { return device_string(t.device, t.device_index); }

// snprintf, not an ostringstream: iostream float formatting goes through libstdc++'s locale
// facets, which crash when the library is linked into a module that carries a static copy of
// libstdc++ of another version than the process's shared one (the Python extension built by such
// a toolchain). The C locale's '.' is kept whatever LC_NUMERIC says.
std::string float_string(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", double(value));
  for (char* c = text; *c; ++c)
    if (*c == *std::localeconv()->decimal_point && *c != '.') *c = '.';
  return text;
}

// ---------------------------------------------------------------------------------------------
// Well-formed views
// ---------------------------------------------------------------------------------------------
Status check_view_ndim(const TensorView& t, std::string_view name) {
  if (t.ndim < 0 || t.ndim > kMaxDims)
    return invalid_argument(name, "ndim must be in [0, " + std::to_string(kMaxDims) +
                                      "] (0 = not given; shape and strides of equal length)",
                            std::to_string(t.ndim));
  return {};
}

Status check_known_dtype(const TensorView& t, std::string_view name) {
  if (dtype_size(t.dtype) == 0)
    return invalid_argument(name, "dtype must be a flashattn::DType value", std::to_string(int(t.dtype)));
  return {};
}

Status check_known_device(const TensorView& t, std::string_view name) {
  if (t.device != DeviceType::Cpu && t.device != DeviceType::Cuda)
    return invalid_argument(name, "device must be DeviceType::Cpu or DeviceType::Cuda", device_string(t));
  if (t.device == DeviceType::Cuda && t.device_index < 0)
    return invalid_argument(name, "a CUDA device index must be >= 0", std::to_string(t.device_index));
  return {};
}

Status check_shape_non_negative(const TensorView& t, std::string_view name) {
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] < 0) return invalid_argument(name, "every dimension must be >= 0", "shape " + shape_string(t));
  return {};
}

Status check_strides_non_negative(const TensorView& t, std::string_view name) {
  if (t.numel() == 0) return {};  // never dereferenced: numpy reports strides of 0 for empty arrays
  for (int d = 0; d < t.ndim; ++d)
    if (t.stride[d] < 0)
      return invalid_argument(name, "strides must be >= 0 (negative strides are not supported)",
                              "strides " + strides_string(t));
  return {};
}

Status check_size_fits_int64(const TensorView& t, std::string_view name) {
  const int64_t esize = element_size(t);
  bool empty = false;
  for (int d = 0; d < t.ndim; ++d) empty = empty || t.shape[d] == 0;
  int64_t count = 1, reach = 0, bytes = 0, span_bytes = 0;
  bool overflow = false;
  for (int d = 0; d < t.ndim && !overflow; ++d) {
    int64_t term = 0;
    overflow = __builtin_mul_overflow(count, t.shape[d], &count);
    if (!empty && !overflow) {
      overflow = __builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &term) ||
                 __builtin_add_overflow(reach, term, &reach);
    }
  }
  overflow = overflow || __builtin_mul_overflow(count, esize, &bytes);
  if (!empty && !overflow)
    overflow = __builtin_add_overflow(reach, int64_t(1), &reach) || __builtin_mul_overflow(reach, esize, &span_bytes);
  if (overflow)
    return invalid_argument(name, "the number of elements and the bytes the view spans must fit in int64",
                            "shape " + shape_string(t) + " strides " + strides_string(t));
  if (!empty && reinterpret_cast<uintptr_t>(t.data) > UINTPTR_MAX - uintptr_t(span_bytes))
    return invalid_argument(name, "the memory the view spans must not wrap around the address space",
                            "data " + std::to_string(reinterpret_cast<uintptr_t>(t.data)) + " spanning " +
                                std::to_string(span_bytes) + " bytes");
  return {};
}

Status check_well_formed(const TensorView& t, std::string_view name) {
  if (Status s = check_view_ndim(t, name); !s) return s;
  if (!t.defined()) return {};
  for (auto rule : {check_known_dtype, check_known_device, check_shape_non_negative,
                    check_strides_non_negative, check_size_fits_int64})
    if (Status s = rule(t, name); !s) return s;
  return {};
}

// ---------------------------------------------------------------------------------------------
// Presence
// ---------------------------------------------------------------------------------------------
Status check_defined(const TensorView& t, std::string_view name) {
  if (!t.defined()) return invalid_argument(name, "is required", "an empty TensorView (ndim 0)");
  return {};
}

Status check_paired(const TensorView& a, std::string_view a_name, const TensorView& b,
                    std::string_view b_name) {
  if (a.defined() && !b.defined())
    return invalid_argument(b_name, "must be given together with " + quoted(a_name), "nothing");
  if (b.defined() && !a.defined())
    return invalid_argument(a_name, "must be given together with " + quoted(b_name), "nothing");
  return {};
}

Status check_required_with(const TensorView& t, std::string_view name, const TensorView& other,
                           std::string_view other_name) {
  if (other.defined() && !t.defined())
    return invalid_argument(name, "is required when " + quoted(other_name) + " is given", "nothing");
  return {};
}

Status check_absent_with(const TensorView& t, std::string_view name, const TensorView& other,
                         std::string_view other_name) {
  if (other.defined() && t.defined())
    return invalid_argument(name, "must not be given together with " + quoted(other_name),
                            "a tensor of shape " + shape_string(t));
  return {};
}

Status check_data(const TensorView& t, std::string_view name) {
  if (t.data == nullptr && t.numel() > 0)
    return invalid_argument(name, "data must be non-null when the tensor has elements",
                            "nullptr with shape " + shape_string(t));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------
Status check_dtype(const TensorView& t, std::string_view name, DType expected) {
  if (t.dtype != expected)
    return invalid_argument(name, std::string("dtype must be ") + dtype_name(expected), dtype_name(t.dtype));
  return {};
}

Status check_attention_dtype(const TensorView& t, std::string_view name) {
  if (t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F32 && t.dtype != DType::F8E4M3)
    return invalid_argument(name, "dtype must be float16, bfloat16, float32 or float8_e4m3fn", dtype_name(t.dtype));
  return {};
}

Status check_dtype_matches(const TensorView& t, std::string_view name, DType reference,
                           std::string_view reference_name) {
  if (t.dtype != reference)
    return invalid_argument(name,
                            "dtype must equal the dtype of " + quoted(reference_name) + " (" +
                                dtype_name(reference) + ")",
                            dtype_name(t.dtype));
  return {};
}

Status check_output_dtype(const TensorView& t, std::string_view name, DType input_dtype, bool allow_f32) {
  if (allow_f32 && t.dtype == DType::F32) return {};
  if (input_dtype == DType::F8E4M3) {
    if (t.dtype == DType::BF16 || t.dtype == DType::F16) return {};
    return invalid_argument(name,
                            "dtype must be bfloat16 or float16 for float8_e4m3fn inputs (FlashAttention-3 writes "
                            "bfloat16)",
                            dtype_name(t.dtype));
  }
  if (t.dtype == input_dtype) return {};
  return invalid_argument(name, std::string("dtype must equal the inputs' dtype (") + dtype_name(input_dtype) + ")",
                          dtype_name(t.dtype));
}

Status check_descale_needs_fp8(const TensorView& descale, std::string_view name, DType input_dtype) {
  if (descale.defined() && input_dtype != DType::F8E4M3)
    return invalid_argument(name,
                            std::string("is only for float8_e4m3fn inputs (q is ") + dtype_name(input_dtype) +
                                "; leave it unset)",
                            "a tensor of shape " + shape_string(descale));
  return {};
}

Status check_fp8_no_dropout(float dropout_p) {
  if (dropout_p != 0.f)
    return invalid_argument("dropout_p",
                            "must be 0 with float8_e4m3fn inputs (fp8 attention is forward-only, for inference, "
                            "as in FlashAttention-3)",
                            float_string(dropout_p));
  return {};
}

Status check_fp8_no_rotary(const TensorView& rotary_cos) {
  if (rotary_cos.defined())
    return invalid_argument("rotary_cos",
                            "must not be given with float8_e4m3fn inputs (the tables would be fp8, and rotated fp8 "
                            "keys would be rounded twice: apply rotary before quantising)",
                            "a tensor of shape " + shape_string(rotary_cos));
  return {};
}

Status check_fp8_has_no_backward(const TensorView& q) {
  if (q.dtype == DType::F8E4M3)
    return unsupported("q", "float8_e4m3fn inputs have no backward, as in FlashAttention-3 (the fp8 forward is for "
                            "inference)");
  return {};
}

Status check_float_output_dtype(const TensorView& t, std::string_view name) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    return invalid_argument(name, "dtype must be float32, float16 or bfloat16", dtype_name(t.dtype));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------
Status check_ndim(const TensorView& t, std::string_view name, int expected, std::string_view layout) {
  if (t.ndim != expected)
    return invalid_argument(name,
                            "ndim must be " + std::to_string(expected) + (layout.empty() ? "" : " ") +
                                std::string(layout),
                            std::to_string(t.ndim) + " (shape " + shape_string(t) + ")");
  return {};
}

Status check_dim(const TensorView& t, std::string_view name, int dim, const DimSpec& expected) {
  if (dim >= t.ndim || t.shape[dim] != expected.size)
    return invalid_argument(name,
                            "dim " + std::to_string(dim) + " must equal " + std::string(expected.meaning) + " (" +
                                std::to_string(expected.size) + ")",
                            (dim < t.ndim ? std::to_string(t.shape[dim]) : std::string("no such dim")) +
                                " (shape " + shape_string(t) + ")");
  return {};
}

Status check_shape(const TensorView& t, std::string_view name, std::initializer_list<DimSpec> dims) {
  if (t.ndim != int(dims.size()))
    return check_ndim(t, name, int(dims.size()), "");
  int d = 0;
  for (const DimSpec& spec : dims)
    if (Status s = check_dim(t, name, d++, spec); !s) return s;
  return {};
}

Status check_dims_fit_int32(const TensorView& t, std::string_view name) {
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] > INT32_MAX)
      return invalid_argument(name, "every dimension must fit in int32 (< 2^31)", "shape " + shape_string(t));
  return {};
}

Status check_head_dim(int64_t head_dim, std::string_view name, std::string_view what) {
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
    return invalid_argument(name,
                            std::string(what) +
                                " must be a multiple of 8 in [8, 256] (the Python layer pads other sizes)",
                            std::to_string(head_dim));
  return {};
}

Status check_heads_positive(int64_t heads, std::string_view name, std::string_view what) {
  if (heads <= 0) return invalid_argument(name, std::string(what) + " must be > 0", std::to_string(heads));
  return {};
}

Status check_gqa(int64_t heads_q, int64_t heads_k, std::string_view name) {
  if (heads_k <= 0 || heads_q % heads_k != 0)
    return invalid_argument(name, "heads_k must divide heads_q (" + std::to_string(heads_q) + ") for GQA/MQA",
                            std::to_string(heads_k));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Layout and placement
// ---------------------------------------------------------------------------------------------
Status check_last_dim_contiguous(const TensorView& t, std::string_view name) {
  if (t.numel() == 0) return {};  // any strides: nothing is read or written
  const int last = t.ndim - 1;
  if (last >= 0 && t.shape[last] > 1 && t.stride[last] != 1)
    return invalid_argument(name, "the last dimension must be contiguous (stride 1)",
                            "strides " + strides_string(t));
  return {};
}

Status check_contiguous(const TensorView& t, std::string_view name) {
  if (!t.is_contiguous())
    return invalid_argument(name, "must be contiguous (row-major)",
                            "shape " + shape_string(t) + " strides " + strides_string(t));
  return {};
}

Status check_alignment(const TensorView& t, std::string_view name, Alignment kind) {
  if (t.numel() == 0) return {};
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  const int64_t esize = element_size(t);
  if (kind == Alignment::Vectorized && t.device == DeviceType::Cuda) {
    if (address % 16 != 0)
      return invalid_argument(name, "data of a CUDA tensor must be 16-byte aligned",
                              "address " + std::to_string(address));
    for (int d = 0; d + 1 < t.ndim; ++d)
      if (t.shape[d] > 1 && (t.stride[d] * esize) % 16 != 0)
        return invalid_argument(name,
                                "every stride but the last of a CUDA tensor must be a multiple of 16 bytes",
                                "stride " + std::to_string(t.stride[d]) + " (" + std::to_string(t.stride[d] * esize) +
                                    " bytes) in dim " + std::to_string(d));
    return {};
  }
  if (address % uintptr_t(esize) != 0)
    return invalid_argument(name, "data must be aligned to its element size (" + std::to_string(esize) + " bytes)",
                            "address " + std::to_string(address));
  return {};
}

Status check_same_device(const TensorView& t, std::string_view name, const TensorView& reference,
                         std::string_view reference_name) {
  if (!same_device(t, reference))
    return invalid_argument(name,
                            "must be on the device of " + quoted(reference_name) + " (" + device_string(reference) + ")",
                            device_string(t));
  return {};
}

Status check_host(const TensorView& t, std::string_view name, std::string_view why) {
  if (t.device != DeviceType::Cpu)
    return invalid_argument(name, "must be a host tensor (" + std::string(why) + ")", device_string(t));
  return {};
}

Status check_no_self_overlap(const TensorView& t, std::string_view name) {
  if (t.numel() <= 1) return {};
  if (!strides_nested(byte_dims(t)))
    return invalid_argument(name, "an output's elements must not alias each other (no zero or interleaved strides)",
                            "shape " + shape_string(t) + " strides " + strides_string(t));
  return {};
}

Status check_no_overlap(const TensorView& output, std::string_view output_name, const TensorView& other,
                        std::string_view other_name) {
  if (!output.defined() || !other.defined() || output.numel() == 0 || other.numel() == 0) return {};
  if (output.data == nullptr || other.data == nullptr) return {};
  if (!same_device(output, other)) return {};
  const ByteRange a = byte_range(output), b = byte_range(other);
  if (a.end <= b.begin || b.end <= a.begin) return {};
  // The ranges intersect. Views cut from one buffer with the same layout (dq/dk/dv of a packed
  // dqkv, k/v of an interleaved kv cache) interleave without sharing a byte: test exactly.
  if (same_layout(output, other)) {
    const std::vector<ByteDim> dims = byte_dims(output);
    const int64_t delta = int64_t(b.begin - a.begin);  // two's complement: negative when b < a
    if (strides_nested(dims) && !difference_representable(dims, int(dims.size()) - 1, delta)) return {};
  }
  return invalid_argument(output_name, "must not overlap the memory of " + quoted(other_name),
                          "overlapping byte ranges [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                              ") and [" + std::to_string(b.begin) + ", " + std::to_string(b.end) + ")");
}

// ---------------------------------------------------------------------------------------------
// Sequence lengths
// ---------------------------------------------------------------------------------------------
Status check_cu_seqlens_contents(const TensorView& cu, std::string_view name, int64_t batch, int64_t total_rows,
                                 std::string_view rows_name) {
  if (cu.device != DeviceType::Cpu) return {};  // on the GPU: not readable here; kernels clamp
  const int32_t* v = int_data(cu);
  const std::string n(name);
  if (v[0] != 0) return invalid_argument(name, n + "[0] must be 0", std::to_string(v[0]));
  for (int64_t b = 0; b < batch; ++b)
    if (v[b + 1] < v[b])
      return invalid_argument(name, "must be non-decreasing",
                              n + "[" + std::to_string(b + 1) + "] = " + std::to_string(v[b + 1]) + " < " + n + "[" +
                                  std::to_string(b) + "] = " + std::to_string(v[b]));
  if (v[batch] > total_rows)
    return invalid_argument(name,
                            "the last entry must be <= the " + std::string(rows_name) + " (" +
                                std::to_string(total_rows) + ")",
                            n + "[" + std::to_string(batch) + "] = " + std::to_string(v[batch]));
  return {};
}

Status check_seqused_contents(const TensorView& seqused, std::string_view name, int64_t batch,
                              const int32_t* cu_seqlens_k, int64_t dense_seqlen_k) {
  if (seqused.device != DeviceType::Cpu) return {};  // kernels clamp
  const int32_t* v = int_data(seqused);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t keys = cu_seqlens_k != nullptr ? int64_t(cu_seqlens_k[b + 1]) - cu_seqlens_k[b] : dense_seqlen_k;
    if (v[b] < 0 || v[b] > keys)
      return invalid_argument(name,
                              "entries must be in [0, the key length of their sequence]; sequence " +
                                  std::to_string(b) + " has " + std::to_string(keys) + " keys",
                              std::string(name) + "[" + std::to_string(b) + "] = " + std::to_string(v[b]));
  }
  return {};
}

Status check_max_seqlen_value(int value, std::string_view name) {
  if (value < 0) return invalid_argument(name, "must be >= 0 (0 derives it from cu_seqlens)", std::to_string(value));
  return {};
}

Status check_max_seqlen_bound(int value, std::string_view name, int64_t longest) {
  if (value > 0 && value < longest)
    return invalid_argument(name, "must be >= the longest sequence (" + std::to_string(longest) + ")",
                            std::to_string(value));
  return {};
}

Status check_max_seqlen_derivable(int value, std::string_view name, const TensorView& cu, std::string_view cu_name) {
  if (value == 0 && cu.device != DeviceType::Cpu)
    return invalid_argument(name,
                            "must be given (> 0) when " + quoted(cu_name) +
                                " is a CUDA tensor (its contents cannot be read on the host)",
                            "0");
  return {};
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------
Status check_window(int value, std::string_view name) {
  if (value < -1) return invalid_argument(name, "must be >= -1 (-1 = unbounded)", std::to_string(value));
  return {};
}

Status check_softcap(float softcap) {
  if (!std::isfinite(softcap) || softcap < 0.f)
    return invalid_argument("softcap", "must be finite and >= 0 (0 = off)", float_string(softcap));
  return {};
}

Status check_softmax_scale(const std::optional<float>& scale) {
  if (scale && !std::isfinite(*scale))
    return invalid_argument("softmax_scale", "must be finite when given", float_string(*scale));
  return {};
}

Status check_dropout(float dropout_p) {
  if (!(dropout_p >= 0.f && dropout_p < 1.f))  // written so that NaN fails too
    return invalid_argument("dropout_p", "must be in [0, 1)", float_string(dropout_p));
  return {};
}

Status check_num_splits(int num_splits) {
  if (num_splits < 0 || num_splits > 256)
    return invalid_argument("num_splits", "must be in [0, 256] (0 = the library chooses, 1 = no split)",
                            std::to_string(num_splits));
  return {};
}

Status check_backend(Backend backend) {
  switch (backend) {
    case Backend::Auto:
    case Backend::Cpu:
    case Backend::Fa2:
    case Backend::Fa3: return {};
  }
  return invalid_argument("backend", "must be Backend::Auto, Cpu, Fa2 or Fa3", std::to_string(int(backend)));
}

Status check_workspace(const WorkspaceAllocator& workspace) {
  if ((workspace.allocate == nullptr) != (workspace.release == nullptr))
    return invalid_argument("workspace", "allocate and release must be given together (or neither: the library's pool)",
                            workspace.allocate == nullptr ? "release without allocate" : "allocate without release");
  return {};
}

Status check_cpu_threads(int threads, int max_threads) {
  if (threads < 0 || threads > max_threads)
    return invalid_argument("threads",
                            "must be in [0, " + std::to_string(max_threads) +
                                "] (0 = all hardware threads; at most max(64, 4 x the hardware threads))",
                            std::to_string(threads));
  return {};
}

// ---------------------------------------------------------------------------------------------
// KV cache
// ---------------------------------------------------------------------------------------------
Status check_page_size(int64_t page_size, std::string_view name) {
  if (page_size < 1)
    return invalid_argument(name, "page_size (dim 1 of a paged cache) must be >= 1", std::to_string(page_size));
  return {};
}

Status check_paged_needs_varlen(bool varlen) {
  if (!varlen)
    return invalid_argument("block_table",
                            "a paged k/v in fwd needs the varlen layout (cu_seqlens_q and cu_seqlens_k give the "
                            "sequences; fwd_kvcache takes a paged cache with dense queries)",
                            "no cu_seqlens_q");
  return {};
}

Status check_paged_seqlens_contents(const TensorView& cu_seqlens_k, int64_t batch, int64_t capacity) {
  if (cu_seqlens_k.device != DeviceType::Cpu) return {};
  FA_CHECK(check_cu_seqlens_contents(cu_seqlens_k, "cu_seqlens_k", batch, INT32_MAX, "int32 range"));
  const int32_t* v = int_data(cu_seqlens_k);
  for (int64_t b = 0; b < batch; ++b)
    if (int64_t(v[b + 1]) - v[b] > capacity)
      return invalid_argument("cu_seqlens_k",
                              "no sequence may have more keys than a block_table row holds (max_blocks_per_seq * "
                              "page_size = " + std::to_string(capacity) + ")",
                              "sequence " + std::to_string(b) + " has " + std::to_string(int64_t(v[b + 1]) - v[b]));
  return {};
}

Status check_paged_max_seqlen(int max_seqlen_k, int64_t capacity) {
  if (max_seqlen_k > capacity)
    return invalid_argument("max_seqlen_k",
                            "must be <= what a block_table row holds (max_blocks_per_seq * page_size = " +
                                std::to_string(capacity) + ")",
                            std::to_string(max_seqlen_k));
  return {};
}

Status check_cache_capacity(int64_t capacity, std::string_view name, std::string_view how) {
  if (capacity > INT32_MAX)
    return invalid_argument(name, "the cache capacity (" + std::string(how) + ") must fit in int32",
                            std::to_string(capacity));
  return {};
}

Status check_cache_seqlens_contents(const TensorView& cache_seqlens, int64_t batch, int64_t seqlen_new,
                                    int64_t capacity) {
  if (cache_seqlens.device != DeviceType::Cpu) return {};  // kernels clamp
  const int32_t* v = int_data(cache_seqlens);
  for (int64_t b = 0; b < batch; ++b) {
    const std::string entry = "cache_seqlens[" + std::to_string(b) + "] = " + std::to_string(v[b]);
    if (v[b] < 0) return invalid_argument("cache_seqlens", "entries must be >= 0", entry);
    if (int64_t(v[b]) + seqlen_new > capacity)
      return invalid_argument("cache_seqlens",
                              "cache_seqlens[b] + seqlen_new (" + std::to_string(seqlen_new) +
                                  ") must be <= the cache capacity (" + std::to_string(capacity) + ")",
                              entry);
  }
  return {};
}

Status check_cache_batch_idx_contents(const TensorView& index, int64_t batch, int64_t batch_cache,
                                      bool must_be_distinct) {
  if (index.device != DeviceType::Cpu) return {};  // kernels clamp
  const int32_t* v = int_data(index);
  for (int64_t b = 0; b < batch; ++b)
    if (v[b] < 0 || v[b] >= batch_cache)
      return invalid_argument("cache_batch_idx",
                              "entries must be in [0, batch of k_cache (" + std::to_string(batch_cache) + "))",
                              "cache_batch_idx[" + std::to_string(b) + "] = " + std::to_string(v[b]));
  if (must_be_distinct) {
    std::vector<int32_t> sorted(v, v + batch);
    std::sort(sorted.begin(), sorted.end());
    const auto repeat = std::adjacent_find(sorted.begin(), sorted.end());
    if (repeat != sorted.end())
      return invalid_argument("cache_batch_idx",
                              "entries must be distinct when k_new is given (two sequences would append to "
                              "one cache row)",
                              "cache row " + std::to_string(*repeat) + " more than once");
  }
  return {};
}

Status check_cache_leftpad_contents(const TensorView& leftpad, int64_t batch, const int32_t* cache_seqlens,
                                    int64_t capacity) {
  if (leftpad.device != DeviceType::Cpu) return {};  // kernels see no keys where it passes the end
  const int32_t* v = int_data(leftpad);
  for (int64_t b = 0; b < batch; ++b) {
    const std::string entry = "cache_leftpad[" + std::to_string(b) + "] = " + std::to_string(v[b]);
    if (v[b] < 0) return invalid_argument("cache_leftpad", "entries must be >= 0", entry);
    if (cache_seqlens != nullptr && v[b] > cache_seqlens[b])
      return invalid_argument("cache_leftpad", "cache_leftpad[b] must be <= cache_seqlens[b] (" +
                                                   std::to_string(cache_seqlens[b]) + ")",
                              entry);
    if (v[b] > capacity)
      return invalid_argument("cache_leftpad",
                              "entries must be <= the cache capacity (" + std::to_string(capacity) + ")", entry);
  }
  return {};
}

Status check_block_table_contents(const TensorView& block_table, int64_t num_blocks, int64_t page_size,
                                  const std::vector<PositionRange>& used, std::string_view cache_name) {
  if (block_table.device != DeviceType::Cpu) return {};  // kernels clamp
  const int32_t* v = int_data(block_table);
  const int64_t max_blocks = block_table.shape[1], row_stride = block_table.stride[0];
  for (int64_t b = 0; b < int64_t(used.size()); ++b) {
    const PositionRange r = used[size_t(b)];
    if (r.begin >= r.end) continue;
    const int64_t pages = std::min(max_blocks, (r.end + page_size - 1) / page_size);
    for (int64_t p = r.begin / page_size; p < pages; ++p) {
      const int32_t block = v[b * row_stride + p];
      if (block < 0 || block >= num_blocks)
        return invalid_argument("block_table",
                                "entries for the pages in use must be in [0, num_blocks of " + std::string(cache_name) +
                                    " (" + std::to_string(num_blocks) + "))",
                                "block_table[" + std::to_string(b) + "][" + std::to_string(p) +
                                    "] = " + std::to_string(block));
    }
  }
  return {};
}

Status check_block_table_writes(const TensorView& block_table, int64_t batch, int64_t page_size,
                                const int32_t* cache_seqlens, int64_t seqlen_new) {
  if (block_table.device != DeviceType::Cpu || seqlen_new <= 0) return {};  // kernels cannot tell
  struct PageUse {
    int32_t block;
    int64_t seq, page;
    bool written;
  };
  const int32_t* v = int_data(block_table);
  const int64_t row_stride = block_table.stride[0];
  std::vector<PageUse> uses;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t first_new = cache_seqlens[b], end = first_new + seqlen_new;
    for (int64_t p = 0; p < (end + page_size - 1) / page_size; ++p)
      uses.push_back({v[b * row_stride + p], b, p, p >= first_new / page_size});
  }
  std::sort(uses.begin(), uses.end(), [](const PageUse& x, const PageUse& y) {
    return x.block != y.block ? x.block < y.block : x.seq != y.seq ? x.seq < y.seq : x.page < y.page;
  });
  const auto entry = [](const PageUse& u) {
    return "block_table[" + std::to_string(u.seq) + "][" + std::to_string(u.page) + "]";
  };
  for (size_t first = 0, next = 0; first < uses.size(); first = next) {
    next = first + 1;
    while (next < uses.size() && uses[next].block == uses[first].block) ++next;
    if (next - first == 1) continue;
    const auto written = std::find_if(uses.begin() + std::ptrdiff_t(first), uses.begin() + std::ptrdiff_t(next),
                                      [](const PageUse& u) { return u.written; });
    if (written == uses.begin() + std::ptrdiff_t(next)) continue;  // a shared read-only page: fine
    const PageUse& other = written == uses.begin() + std::ptrdiff_t(first) ? uses[first + 1] : uses[first];
    return invalid_argument("block_table",
                            "a page that k_new is appended into must appear only once among the pages in use "
                            "(two sequences would write it, or read keys being written; only pages without "
                            "new keys may be shared)",
                            "block " + std::to_string(written->block) + " at " + entry(*written) +
                                " (appended into) and at " + entry(other));
  }
  return {};
}

Status check_rotary_dim(int64_t rotary_dim, int64_t head_dim) {
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    return invalid_argument("rotary_cos",
                            "rotary_dim (2 * dim 1) must be even and in [2, head_dim (" + std::to_string(head_dim) +
                                ")]",
                            std::to_string(rotary_dim));
  return {};
}

Status check_rotary_length(int64_t seqlen_ro, int64_t batch, const int32_t* cache_seqlens, int64_t seqlen_new,
                           int64_t seqlen_q, const int32_t* cu_seqlens_q, bool q_per_row) {
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t first = cache_seqlens != nullptr ? int64_t(cache_seqlens[b]) : 0;
    const int64_t rows = cu_seqlens_q != nullptr ? int64_t(cu_seqlens_q[b + 1]) - cu_seqlens_q[b] : seqlen_q;
    int64_t needed = 0;  // one past the largest position sequence b rotates
    if (seqlen_new > 0) needed = std::max(needed, first + seqlen_new);
    if (rows > 0) needed = std::max(needed, first + (q_per_row ? rows : 1));
    if (seqlen_ro < needed)
      return invalid_argument("rotary_cos",
                              "seqlen_ro (dim 0) must cover every rotated position (sequence " + std::to_string(b) +
                                  " uses positions up to " + std::to_string(needed - 1) + ")",
                              std::to_string(seqlen_ro));
  }
  return {};
}

Status check_splits(int64_t splits, std::string_view name) {
  if (splits < 1) return invalid_argument(name, "the number of splits (dim 0) must be >= 1", std::to_string(splits));
  return {};
}

Status check_alibi_shape(const TensorView& alibi, int64_t batch, int64_t heads_q) {
  if (alibi.ndim == 1) return check_dim(alibi, "alibi_slopes", 0, {heads_q, "heads_q of q"});
  if (alibi.ndim == 2) return check_shape(alibi, "alibi_slopes", {{batch, "the batch"}, {heads_q, "heads_q of q"}});
  return invalid_argument("alibi_slopes", "ndim must be 1 (heads_q) or 2 (batch, heads_q)",
                          std::to_string(alibi.ndim) + " (shape " + shape_string(alibi) + ")");
}

Status check_same_strides(const TensorView& t, std::string_view name, const TensorView& reference,
                          std::string_view reference_name) {
  if (t.numel() == 0 || reference.numel() == 0) return {};
  for (int d = 0; d < t.ndim && d < reference.ndim; ++d)
    if (t.shape[d] > 1 && t.stride[d] != reference.stride[d])
      return invalid_argument(name, "strides must equal those of " + quoted(reference_name) + " " +
                                        strides_string(reference),
                              strides_string(t));
  return {};
}

Status check_cache_rows(int64_t batch_cache, int64_t batch) {
  if (batch_cache < batch)
    return invalid_argument("k_cache",
                            "dim 0 (batch_cache) must be >= the batch of q (" + std::to_string(batch) +
                                ") without cache_batch_idx or block_table",
                            std::to_string(batch_cache));
  return {};
}

Status check_same_shape(const TensorView& t, std::string_view name, const TensorView& reference,
                        std::string_view reference_name) {
  bool same = t.ndim == reference.ndim;
  for (int d = 0; same && d < t.ndim; ++d) same = t.shape[d] == reference.shape[d];
  if (!same)
    return invalid_argument(name, "shape must equal the shape of " + quoted(reference_name) + " " +
                                      shape_string(reference),
                            shape_string(t));
  return {};
}

Status check_cu_seqlens_length(const TensorView& cu, std::string_view name) {
  if (cu.shape[0] < 1)
    return invalid_argument(name, "must hold batch + 1 >= 1 entries", "shape " + shape_string(cu));
  return {};
}

}  // namespace flashattn::api
