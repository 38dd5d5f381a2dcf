// flashattn._ext: the C++ API for Python, over DLPack.
//
// Every array argument is an nb::ndarray, which nanobind fills from anything that speaks DLPack
// (numpy arrays, torch tensors, ...): device, dtype, shape, strides and data pointer become a
// TensorView and nothing is copied. The extension never allocates tensors: the Python layer
// allocates outputs with the caller's framework (numpy, or torch's caching allocator on the current
// stream) and passes them in, so this module is not compiled against any framework's C++ ABI.
//
// Errors are not raised here: each entry returns None on success or a tuple
// (code, argument, message) that flashattn/_errors.py turns into ValueError/TypeError/... with the
// same message. That keeps the exception classes in Python, where they are documented.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "flashattn/flashattn.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using flashattn::Backend;
using flashattn::DeviceType;
using flashattn::DType;
using flashattn::ErrorCode;
using flashattn::Status;
using flashattn::TensorView;

// Inputs are read-only views (read-only numpy arrays are accepted); outputs must be writable.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// None, or (code, argument, message) with code the ErrorCode's name.
using StatusResult = std::optional<std::tuple<std::string, std::string, std::string>>;

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::Ok: return "ok";
    case ErrorCode::InvalidArgument: return "invalid_argument";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::CudaError: return "cuda_error";
    case ErrorCode::Internal: return "internal";
  }
  return "internal";
}

StatusResult to_result(const Status& status) {
  if (status.ok()) return std::nullopt;
  return std::make_tuple(std::string(error_code_name(status.code())), status.argument(), status.message());
}

// An array the C++ API cannot describe (dtype, device, rank); caught by each entry and returned
// like a Status, in the library's message format.
struct ConversionError {
  std::string code;
  std::string argument;
  std::string message;
};

[[noreturn]] void conversion_error(const char* code, const char* name, const std::string& rule,
                                   const std::string& got) {
  throw ConversionError{code, name, std::string("argument '") + name + "': " + rule + ", got " + got};
}

std::string dlpack_dtype_string(const nb::dlpack::dtype& dt) {
  const char* kind = "";
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
    default: return "dlpack dtype code " + std::to_string(int(dt.code)) + " bits " + std::to_string(int(dt.bits));
  }
  return std::string(kind) + std::to_string(int(dt.bits));
}

DType to_dtype(const nb::dlpack::dtype& dt, const char* name) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    const auto code = static_cast<Code>(dt.code);
    if (code == Code::Float && dt.bits == 32) return DType::F32;
    if (code == Code::Float && dt.bits == 16) return DType::F16;
    if (code == Code::Bfloat && dt.bits == 16) return DType::BF16;
    if (code == Code::Float8_E4M3FN && dt.bits == 8) return DType::F8E4M3;
    if (code == Code::Int && dt.bits == 32) return DType::I32;
    if (code == Code::UInt && dt.bits == 8) return DType::U8;
  }
  conversion_error("invalid_argument", name,
                   "dtype must be one of float32, float16, bfloat16, float8_e4m3fn, int32, uint8",
                   dlpack_dtype_string(dt));
}

template <typename Array>
TensorView to_view(const Array& a, const char* name) {
  TensorView view;
  if (!a.is_valid()) return view;  // None: an optional argument not given
  if (a.ndim() < 1 || a.ndim() > size_t(flashattn::kMaxDims))
    conversion_error("invalid_argument", name,
                     "ndim must be in [1, " + std::to_string(flashattn::kMaxDims) + "]", std::to_string(a.ndim()));
  const int device_type = a.device_type();
  if (device_type == nb::device::cpu::value || device_type == nb::device::cuda_host::value) {
    view.device = DeviceType::Cpu;
    view.device_index = 0;
  } else if (device_type == nb::device::cuda::value || device_type == nb::device::cuda_managed::value) {
    view.device = DeviceType::Cuda;
    view.device_index = a.device_id();
  } else {
    conversion_error("unsupported", name, "must live on the CPU or a CUDA device",
                     "dlpack device type " + std::to_string(device_type));
  }
  view.dtype = to_dtype(a.dtype(), name);
  view.data = const_cast<void*>(static_cast<const void*>(a.data()));
  view.ndim = int(a.ndim());
  for (int i = 0; i < view.ndim; ++i) {
    view.shape[i] = int64_t(a.shape(size_t(i)));
    view.stride[i] = a.stride(size_t(i));  // in elements, as TensorView wants
  }
  return view;
}

// DLPack producers that cannot export float8 (torch before DLPack 1.x) pass fp8 arrays as uint8
// views of the same memory and name them in float8_views: their bytes are e4m3 values.
using Float8Views = std::vector<std::string>;

TensorView input_view(const InArray& a, const char* name, const Float8Views& float8_views) {
  TensorView view = to_view(a, name);
  bool listed = false;
  for (const std::string& listed_name : float8_views) listed = listed || listed_name == name;
  if (!listed || !view.defined()) return view;
  if (view.dtype != DType::U8)
    conversion_error("invalid_argument", name,
                     "dtype must be uint8 (the bytes of float8_e4m3fn data) when named in float8_views",
                     flashattn::dtype_name(view.dtype));
  view.dtype = DType::F8E4M3;
  return view;
}

// q_descale, k_descale, v_descale (fp8 inputs).
void fill_descales(const InArray& q_descale, const InArray& k_descale, const InArray& v_descale,
                   flashattn::Fp8Descales* p) {
  p->q_descale = to_view(q_descale, "q_descale");
  p->k_descale = to_view(k_descale, "k_descale");
  p->v_descale = to_view(v_descale, "v_descale");
}

Backend to_backend(const std::string& name) {
  if (name == "auto") return Backend::Auto;
  if (name == "cpu") return Backend::Cpu;
  if (name == "fa2") return Backend::Fa2;
  if (name == "fa3") return Backend::Fa3;
  conversion_error("invalid_argument", "backend", "must be 'auto', 'cpu', 'fa2' or 'fa3'", "'" + name + "'");
}

// Runs body (which builds params and calls the library) and turns conversion errors into results.
template <typename Body>
StatusResult run_entry(Body&& body) {
  try {
    return body();
  } catch (const ConversionError& e) {
    return std::make_tuple(e.code, e.argument, e.message);
  }
}

// A framework's allocator for the library's GPU scratch (flashattn::WorkspaceAllocator), given
// from Python as (alloc, release): alloc(nbytes, stream) returns a device address on the current
// device and release(address) gives it back, both ordered on the stream, as torch's caching
// allocator is. An exception from alloc (torch's out-of-memory error, say) fails the library call
// and is raised to the caller after it; one from release is dropped (the memory was handed back
// while queued work still uses it: there is nothing else to do).
class PyWorkspace {
 public:
  explicit PyWorkspace(const nb::object& workspace) {
    if (workspace.is_none()) return;
    if (!nb::isinstance<nb::tuple>(workspace) || nb::len(workspace) != 2 || !PyCallable_Check(workspace[0].ptr()) ||
        !PyCallable_Check(workspace[1].ptr()))
      conversion_error("invalid_argument", "workspace", "must be a tuple (alloc, release) of callables or None",
                       nb::cast<std::string>(nb::repr(workspace)));
    alloc_ = workspace[0];
    release_ = workspace[1];
  }
  flashattn::WorkspaceAllocator allocator() {
    if (!alloc_.is_valid()) return {};
    return {&PyWorkspace::allocate, &PyWorkspace::release, this};
  }
  // After the library call, with the GIL held: alloc's exception, if it raised one.
  void raise_pending() {
    if (pending_) {
      nb::python_error error = std::move(*pending_);
      pending_.reset();
      throw error;
    }
  }

 private:
  // Taking the GIL is free here: GPU calls keep it (call_library).
  static void* allocate(std::size_t bytes, void* stream, void* self) {
    nb::gil_scoped_acquire gil;
    auto* w = static_cast<PyWorkspace*>(self);
    try {
      const nb::object address = w->alloc_(bytes, reinterpret_cast<uintptr_t>(stream));
      return reinterpret_cast<void*>(nb::cast<uintptr_t>(address));
    } catch (nb::python_error& e) {
      if (!w->pending_) w->pending_.emplace(std::move(e));
      return nullptr;
    } catch (const std::exception&) {  // alloc returned something that is not an address
      return nullptr;
    }
  }
  static void release(void* data, void*, void* self) {
    nb::gil_scoped_acquire gil;
    try {
      static_cast<PyWorkspace*>(self)->release_(reinterpret_cast<uintptr_t>(data));
    } catch (const std::exception&) {
    }
  }

  nb::object alloc_, release_;
  std::optional<nb::python_error> pending_;
};

// Calls the library. A call on host tensors runs without the GIL: the CPU backend may take a while
// and runs its own threads. A GPU call only enqueues work and keeps the GIL, as torch's ops do: the
// workspace allocator's Python callbacks then need no hand-over.
template <typename Call, typename Params>
StatusResult call_library(Call&& call, const Params& params, bool on_host, PyWorkspace* workspace = nullptr) {
  Status status;
  if (on_host) {
    nb::gil_scoped_release release;
    status = call(params);
  } else {
    status = call(params);
  }
  if (workspace != nullptr) workspace->raise_pending();
  return to_result(status);
}

// Options every attention entry shares (flashattn::AttnOptions).
struct OptionArgs {
  std::optional<float> softmax_scale;
  bool causal;
  int window_left, window_right;
  float softcap;
  const InArray& alibi_slopes;
  uintptr_t stream;
  const std::string& backend;
  PyWorkspace& workspace;
};

void fill_options(const OptionArgs& o, flashattn::AttnOptions* p) {
  p->softmax_scale = o.softmax_scale;
  p->causal = o.causal;
  p->window_left = o.window_left;
  p->window_right = o.window_right;
  p->softcap = o.softcap;
  p->alibi_slopes = to_view(o.alibi_slopes, "alibi_slopes");
  p->stream = reinterpret_cast<void*>(o.stream);
  p->workspace = o.workspace.allocator();
  p->backend = to_backend(o.backend);
}

// The varlen and dropout arguments fwd and bwd share.
void fill_varlen(const InArray& cu_seqlens_q, const InArray& cu_seqlens_k, const InArray& seqused_k, int max_seqlen_q,
                 int max_seqlen_k, flashattn::VarlenArgs* p) {
  p->cu_seqlens_q = to_view(cu_seqlens_q, "cu_seqlens_q");
  p->cu_seqlens_k = to_view(cu_seqlens_k, "cu_seqlens_k");
  p->seqused_k = to_view(seqused_k, "seqused_k");
  p->max_seqlen_q = max_seqlen_q;
  p->max_seqlen_k = max_seqlen_k;
}

void fill_dropout(float dropout_p, uint64_t dropout_seed, uint64_t dropout_offset, flashattn::DropoutArgs* p) {
  p->dropout_p = dropout_p;
  p->dropout_seed = dropout_seed;
  p->dropout_offset = dropout_offset;
}

StatusResult fwd(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                 const OutArray& softmax_lse, const InArray& cu_seqlens_q, const InArray& cu_seqlens_k,
                 const InArray& seqused_k, int max_seqlen_q, int max_seqlen_k, std::optional<float> softmax_scale,
                 bool causal, int window_left, int window_right, float softcap, const InArray& alibi_slopes,
                 float dropout_p, uint64_t dropout_seed, uint64_t dropout_offset, int num_splits,
                 const InArray& block_table, const InArray& q_descale, const InArray& k_descale,
                 const InArray& v_descale, const Float8Views& float8_views, uintptr_t stream,
                 const nb::object& workspace, const std::string& backend) {
  return run_entry([&]() -> StatusResult {
    PyWorkspace scratch(workspace);
    flashattn::FwdParams p;
    p.q = input_view(q, "q", float8_views);
    p.k = input_view(k, "k", float8_views);
    p.v = input_view(v, "v", float8_views);
    fill_descales(q_descale, k_descale, v_descale, &p);
    p.block_table = to_view(block_table, "block_table");
    p.out = to_view(out, "out");
    p.softmax_lse = to_view(softmax_lse, "softmax_lse");
    fill_varlen(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, &p);
    fill_options({softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, stream, backend, scratch},
                 &p);
    fill_dropout(dropout_p, dropout_seed, dropout_offset, &p);
    p.num_splits = num_splits;
    return call_library(flashattn::fwd, p, p.q.device == DeviceType::Cpu, &scratch);
  });
}

StatusResult bwd(const InArray& dout, const InArray& q, const InArray& k, const InArray& v, const InArray& out,
                 const InArray& softmax_lse, const OutArray& dq, const OutArray& dk, const OutArray& dv,
                 const InArray& cu_seqlens_q, const InArray& cu_seqlens_k, const InArray& seqused_k, int max_seqlen_q,
                 int max_seqlen_k, std::optional<float> softmax_scale, bool causal, int window_left, int window_right,
                 float softcap, const InArray& alibi_slopes, float dropout_p, uint64_t dropout_seed,
                 uint64_t dropout_offset, bool deterministic, uintptr_t stream, const nb::object& workspace,
                 const std::string& backend) {
  return run_entry([&]() -> StatusResult {
    PyWorkspace scratch(workspace);
    flashattn::BwdParams p;
    p.dout = to_view(dout, "dout");
    p.q = to_view(q, "q");
    p.k = to_view(k, "k");
    p.v = to_view(v, "v");
    p.out = to_view(out, "out");
    p.softmax_lse = to_view(softmax_lse, "softmax_lse");
    p.dq = to_view(dq, "dq");
    p.dk = to_view(dk, "dk");
    p.dv = to_view(dv, "dv");
    fill_varlen(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, &p);
    fill_options({softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, stream, backend, scratch},
                 &p);
    fill_dropout(dropout_p, dropout_seed, dropout_offset, &p);
    p.deterministic = deterministic;
    return call_library(flashattn::bwd, p, p.q.device == DeviceType::Cpu, &scratch);
  });
}

// The caches are written only when k_new/v_new are appended; without them a read-only cache is
// valid, so they arrive as read-only views and the Python layer checks writability for appends.
StatusResult fwd_kvcache(const InArray& q, const InArray& k_cache, const InArray& v_cache, const OutArray& out,
                         const InArray& k_new, const InArray& v_new, const InArray& cache_seqlens,
                         const InArray& cache_batch_idx, const InArray& cache_leftpad, const InArray& block_table,
                         const InArray& rotary_cos,
                         const InArray& rotary_sin, bool rotary_interleaved, const OutArray& softmax_lse,
                         std::optional<float> softmax_scale, bool causal, int window_left, int window_right,
                         float softcap, const InArray& alibi_slopes, int num_splits, const InArray& cu_seqlens_q,
                         int max_seqlen_q, const InArray& q_descale, const InArray& k_descale,
                         const InArray& v_descale, const Float8Views& float8_views, uintptr_t stream,
                         const nb::object& workspace, const std::string& backend) {
  return run_entry([&]() -> StatusResult {
    PyWorkspace scratch(workspace);
    flashattn::KvCacheParams p;
    p.q = input_view(q, "q", float8_views);
    p.cu_seqlens_q = to_view(cu_seqlens_q, "cu_seqlens_q");
    p.max_seqlen_q = max_seqlen_q;
    p.k_cache = input_view(k_cache, "k_cache", float8_views);
    p.v_cache = input_view(v_cache, "v_cache", float8_views);
    p.out = to_view(out, "out");
    p.k_new = input_view(k_new, "k_new", float8_views);
    p.v_new = input_view(v_new, "v_new", float8_views);
    fill_descales(q_descale, k_descale, v_descale, &p);
    p.cache_seqlens = to_view(cache_seqlens, "cache_seqlens");
    p.cache_batch_idx = to_view(cache_batch_idx, "cache_batch_idx");
    p.cache_leftpad = to_view(cache_leftpad, "cache_leftpad");
    p.block_table = to_view(block_table, "block_table");
    p.rotary_cos = input_view(rotary_cos, "rotary_cos", float8_views);
    p.rotary_sin = input_view(rotary_sin, "rotary_sin", float8_views);
    p.rotary_interleaved = rotary_interleaved;
    p.softmax_lse = to_view(softmax_lse, "softmax_lse");
    fill_options({softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, stream, backend, scratch},
                 &p);
    p.num_splits = num_splits;
    return call_library(flashattn::fwd_kvcache, p, p.q.device == DeviceType::Cpu, &scratch);
  });
}

StatusResult combine(const InArray& out_partial, const InArray& lse_partial, const OutArray& out,
                     const OutArray& softmax_lse, uintptr_t stream, const nb::object& workspace,
                     const std::string& backend) {
  return run_entry([&]() -> StatusResult {
    PyWorkspace scratch(workspace);
    flashattn::CombineParams p;
    p.out_partial = to_view(out_partial, "out_partial");
    p.lse_partial = to_view(lse_partial, "lse_partial");
    p.out = to_view(out, "out");
    p.softmax_lse = to_view(softmax_lse, "softmax_lse");
    p.stream = reinterpret_cast<void*>(stream);
    p.workspace = scratch.allocator();
    p.backend = to_backend(backend);
    return call_library(flashattn::combine, p, p.out_partial.device == DeviceType::Cpu, &scratch);
  });
}

StatusResult dropout_mask(const OutArray& mask, float dropout_p, uint64_t dropout_seed, uint64_t dropout_offset) {
  return run_entry([&]() -> StatusResult {
    flashattn::DropoutMaskParams p;
    p.mask = to_view(mask, "mask");
    p.dropout_p = dropout_p;
    p.dropout_seed = dropout_seed;
    p.dropout_offset = dropout_offset;
    return call_library(flashattn::dropout_mask, p, true);
  });
}

nb::dict device_info(int device) {
  const flashattn::DeviceInfo info = flashattn::device_info(device);
  nb::dict d;
  d["cuda_built"] = info.cuda_built;
  d["device_count"] = info.device_count;
  d["device"] = info.device;
  d["name"] = info.name;
  d["sm"] = nb::make_tuple(info.sm_major, info.sm_minor);
  d["multiprocessors"] = info.multiprocessors;
  d["global_memory_bytes"] = info.global_memory_bytes;
  d["smem_per_block_optin"] = info.smem_per_block_optin;
  d["l2_bytes"] = info.l2_bytes;
  return d;
}

nb::dict cpu_workspace_stats() {
  const flashattn::WorkspaceStats stats = flashattn::cpu_workspace_stats();
  nb::dict d;
  d["current_bytes"] = stats.current_bytes;
  d["peak_bytes"] = stats.peak_bytes;
  return d;
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "flashattn C++ API over DLPack (internal: use the flashattn package)";
  const auto none = nb::none();

  m.def("fwd", &fwd, "q"_a, "k"_a, "v"_a, "out"_a, nb::kw_only(), "softmax_lse"_a.none() = none,
        "cu_seqlens_q"_a.none() = none, "cu_seqlens_k"_a.none() = none, "seqused_k"_a.none() = none,
        "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0, "softmax_scale"_a.none() = none, "causal"_a = false,
        "window_left"_a = -1, "window_right"_a = -1, "softcap"_a = 0.f, "alibi_slopes"_a.none() = none,
        "dropout_p"_a = 0.f, "dropout_seed"_a = 0, "dropout_offset"_a = 0, "num_splits"_a = 1,
        "block_table"_a.none() = none, "q_descale"_a.none() = none, "k_descale"_a.none() = none,
        "v_descale"_a.none() = none, "float8_views"_a = Float8Views{}, "stream"_a = 0, "workspace"_a = none, "backend"_a = "auto");
  m.def("bwd", &bwd, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "softmax_lse"_a, "dq"_a, "dk"_a, "dv"_a,
        nb::kw_only(), "cu_seqlens_q"_a.none() = none, "cu_seqlens_k"_a.none() = none,
        "seqused_k"_a.none() = none, "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
        "softmax_scale"_a.none() = none, "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1,
        "softcap"_a = 0.f, "alibi_slopes"_a.none() = none, "dropout_p"_a = 0.f, "dropout_seed"_a = 0,
        "dropout_offset"_a = 0, "deterministic"_a = false, "stream"_a = 0, "workspace"_a = none, "backend"_a = "auto");
  m.def("fwd_kvcache", &fwd_kvcache, "q"_a, "k_cache"_a, "v_cache"_a, "out"_a, nb::kw_only(),
        "k_new"_a.none() = none, "v_new"_a.none() = none, "cache_seqlens"_a.none() = none,
        "cache_batch_idx"_a.none() = none, "cache_leftpad"_a.none() = none, "block_table"_a.none() = none,
        "rotary_cos"_a.none() = none,
        "rotary_sin"_a.none() = none, "rotary_interleaved"_a = false, "softmax_lse"_a.none() = none,
        "softmax_scale"_a.none() = none, "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1,
        "softcap"_a = 0.f, "alibi_slopes"_a.none() = none, "num_splits"_a = 0, "cu_seqlens_q"_a.none() = none,
        "max_seqlen_q"_a = 0, "q_descale"_a.none() = none, "k_descale"_a.none() = none,
        "v_descale"_a.none() = none, "float8_views"_a = Float8Views{}, "stream"_a = 0, "workspace"_a = none, "backend"_a = "auto");
  m.def("combine", &combine, "out_partial"_a, "lse_partial"_a, "out"_a, nb::kw_only(),
        "softmax_lse"_a.none() = none, "stream"_a = 0, "workspace"_a = none, "backend"_a = "auto");
  m.def("dropout_mask", &dropout_mask, "mask"_a, "dropout_p"_a, "dropout_seed"_a, "dropout_offset"_a);
  m.def("device_info", &device_info, "device"_a = 0);
  m.def("version", &flashattn::version);
  m.def("set_cpu_threads", [](int threads) { return to_result(flashattn::set_cpu_threads(threads)); }, "threads"_a);
  m.def("cpu_threads", &flashattn::cpu_threads);
  m.def("cpu_workspace_stats", &cpu_workspace_stats);
  m.def("reset_cpu_workspace_peak", &flashattn::reset_cpu_workspace_peak);
}
