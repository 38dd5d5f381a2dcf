// flashattn: exact scaled-dot-product attention without the N x N score matrix.
//
// The only header users include. Every entry point validates its arguments and returns a Status
// naming the argument and the rule it broke; nothing here throws unless you ask
// (Status::throw_if_error). Tensors are described by TensorView (pointer, dtype, shape, strides
// in elements, device); the library never owns or frees caller memory.
//
// Layout conventions (shared with the FlashAttention ecosystem):
//   q            (batch, seqlen_q, heads_q, head_dim)        varlen: (total_q, heads_q, head_dim)
//   k, v         (batch, seqlen_k, heads_k, head_dim[_v])    varlen: (total_k, heads_k, head_dim)
//   out          like q with head_dim_v
//   q/k/v_descale float32 (batch, heads_k), fp8 e4m3 inputs only (see Fp8Descales)
//   softmax_lse  float32 (batch, heads_q, seqlen_q)          varlen: (heads_q, total_q)
//   paged cache  (num_blocks, page_size, heads_k, head_dim) with block_table (batch, max_blocks)
// The last dimension must be contiguous. Causal masks are aligned to the bottom-right corner of
// the score matrix: query row i sees key j iff j <= i + seqlen_k - seqlen_q.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>

namespace flashattn {

// ---------------------------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------------------------
enum class DType : int { F32, F16, BF16, F8E4M3, I32, U8 };
enum class DeviceType : int { Cpu, Cuda };

const char* dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);

inline constexpr int kMaxDims = 5;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;  // 0: argument not given (optional tensors)
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements, not bytes
  DeviceType device = DeviceType::Cpu;
  int device_index = 0;  // the CUDA device; ignored for host tensors

  bool defined() const { return ndim > 0; }
  int64_t numel() const;
  bool is_contiguous() const;
  int64_t size(int dim) const { return shape[dim < 0 ? dim + ndim : dim]; }

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               DeviceType device = DeviceType::Cpu, int device_index = 0);
  // A view with explicit strides (in elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides,
                            DeviceType device = DeviceType::Cpu, int device_index = 0);
};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------
enum class ErrorCode : int {
  Ok = 0,
  InvalidArgument,  // the call breaks a rule of the API (shape, dtype, range, ...)
  Unsupported,      // valid, but the chosen backend cannot run it (the message says why)
  CudaError,        // a CUDA runtime call failed
  Internal,
};

class Status {
 public:
  Status() = default;
  static Status error(ErrorCode code, std::string argument, std::string message);

  bool ok() const { return code_ == ErrorCode::Ok; }
  explicit operator bool() const { return ok(); }
  ErrorCode code() const { return code_; }
  // The offending argument's name ("q", "cu_seqlens_k", ...), empty when none applies.
  const std::string& argument() const { return argument_; }
  // Full message, e.g. "argument 'k': head_dim must equal q's head_dim (64), got 80".
  const std::string& message() const { return message_; }
  // Throws flashattn::Error when not ok.
  void throw_if_error() const;

 private:
  ErrorCode code_ = ErrorCode::Ok;
  std::string argument_;
  std::string message_;
};

class Error : public std::runtime_error {
 public:
  explicit Error(const Status& status)
      : std::runtime_error(status.message()), code_(status.code()), argument_(status.argument()) {}
  ErrorCode code() const { return code_; }
  const std::string& argument() const { return argument_; }

 private:
  ErrorCode code_;
  std::string argument_;
};

// ---------------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------------
enum class Backend : int {
  Auto,  // the fastest backend that supports the call (by device of the tensors, arch, features)
  Cpu,   // tiled FlashAttention on the host, multi-threaded
  Fa2,   // mma.sync kernels, sm80+
  Fa3,   // wgmma/TMA kernels, sm90a
};
const char* backend_name(Backend backend);

// Device memory for a GPU call's own scratch (the backward's fp32 dQ accumulator and row
// statistics, split-KV partials, tile counters), ordered on the call's stream. Not given
// (allocate == nullptr): the library's own stream-ordered pool, which keeps up to 64 MiB a device
// mapped between calls. A framework gives its allocator so that the scratch shows in its memory
// accounting and reuses its cache (the Python package gives torch's caching allocator).
// - allocate returns memory on the current device (the one the call runs on), aligned to 256
//   bytes as cudaMalloc's is, or nullptr when it has none: the call then fails with CudaError
//   naming the step, before launching anything that would use it.
// - release may be called before the call's kernels have run, so both must be ordered on
//   `stream`: memory released there is reused only by later work on that stream, as with
//   cudaFreeAsync and torch's caching allocator. While `stream` is being captured into a CUDA
//   graph, the memory must stay the graph's for every replay (torch's graph pools, CUDA's graph
//   memory nodes). release must not throw.
// - Both are called on the calling thread, during the call. Combine needs no scratch today.
struct WorkspaceAllocator {
  void* (*allocate)(std::size_t bytes, void* stream, void* context) = nullptr;
  void (*release)(void* data, void* stream, void* context) = nullptr;
  void* context = nullptr;
};

// Options every attention entry point shares.
struct AttnOptions {
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim)
  bool causal = false;                 // bottom-right aligned; same as window_right = 0
  int window_left = -1;                // sliding window, relative to the causal diagonal;
  int window_right = -1;               //   -1 = unbounded on that side
  float softcap = 0.f;                 // > 0: logits = softcap * tanh(s * scale / softcap)
  TensorView alibi_slopes;             // float32 (heads_q) or (batch, heads_q): bias
                                       //   -slope * |i + seqlen_k - seqlen_q - j|
  void* stream = nullptr;              // cudaStream_t for GPU backends
  WorkspaceAllocator workspace;        // GPU scratch; default: the library's pool
  Backend backend = Backend::Auto;
};

struct VarlenArgs {
  TensorView cu_seqlens_q;  // int32 (batch + 1): varlen layout when given (with cu_seqlens_k)
  TensorView cu_seqlens_k;  // int32 (batch + 1)
  TensorView seqused_k;     // int32 (batch), optional: keys actually used per sequence
  int max_seqlen_q = 0;     // upper bounds; 0 = derived from cu_seqlens (host tensors only)
  int max_seqlen_k = 0;
};

struct DropoutArgs {
  float dropout_p = 0.f;  // probability of dropping an attention weight, in [0, 1)
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;  // Philox counter offset; advance by >= batch*heads_q per call
};

// FP8 (e4m3) inputs, as in FlashAttention-3: the factors that turn the stored values into the
// real ones, so the attention computed is that of q * q_descale, k * k_descale, v * v_descale.
// Each is optional (absent = 1), float32 (batch, heads_k), on the inputs' device, any strides
// (a stride of 0 broadcasts one factor: a per-tensor scale). Sequence b's kv head hk uses
// k_descale[b][hk] and v_descale[b][hk]; its query head h uses q_descale[b][h / (heads_q / heads_k)]
// (the kv head of h's group). Values are not checked. Given with inputs that are not fp8:
// InvalidArgument naming the descale.
struct Fp8Descales {
  TensorView q_descale, k_descale, v_descale;
};

// q, k, v: float16, bfloat16, float32 (CPU backend), or float8_e4m3fn (all three; forward only:
// bwd refuses them as FlashAttention-3 does). fp8 inputs write out in bfloat16 or float16 and take
// no dropout (fp8 attention is for inference). They run on the CPU backend today; the FA3 fp8
// kernels are built but not yet validated on a GPU (CUDA fp8 tensors: Unsupported naming q).
struct FwdParams : AttnOptions, VarlenArgs, DropoutArgs, Fp8Descales {
  TensorView q, k, v;
  TensorView block_table;  // optional int32 (batch, max_blocks_per_seq), varlen only: k and v are
                           //   paged caches (num_blocks, page_size, heads_k, d); sequence b's keys
                           //   are its first cu_seqlens_k[b + 1] - cu_seqlens_k[b] (or seqused_k[b])
                           //   positions, found through row b of the table (vLLM-style serving)
  TensorView out;          // required; dtype of q (fp8 inputs: bfloat16 or float16)
  TensorView softmax_lse;  // optional float32 output
  int num_splits = 1;      // split-KV: 1 = off, > 1 = that many, 0 = the library chooses
};

struct BwdParams : AttnOptions, VarlenArgs, DropoutArgs {
  TensorView q, k, v, out, dout;
  TensorView softmax_lse;  // required float32, as written by fwd
  TensorView dq, dk, dv;   // outputs, shapes of q, k, v; dtype of q
  bool deterministic = false;  // bitwise reproducible gradients (no float atomics)
};

// fp8 e4m3 q and caches (all of q, caches, k_new, v_new) work as in fwd: out bfloat16 or float16,
// descales (batch, heads_k) indexed by q's batch entry b; rotary is refused with them (the tables
// would be fp8, and rotating fp8 keys rounds them twice: rotate before quantising).
struct KvCacheParams : AttnOptions, Fp8Descales {
  TensorView q;                  // (batch, seqlen_q, heads_q, head_dim), or with cu_seqlens_q
                                 //   (total_q, heads_q, head_dim)
  TensorView cu_seqlens_q;       // optional int32 (batch + 1): varlen queries (as FlashAttention-3)
  int max_seqlen_q = 0;          //   their longest sequence; 0 = derived (host cu_seqlens_q only)
  TensorView k_cache, v_cache;   // (batch_cache, seqlen_cache, heads_k, d) or paged
                                 //   (num_blocks, page_size, heads_k, d) with block_table
  TensorView k_new, v_new;       // optional (batch, seqlen_new, heads_k, d): appended in place at
                                 //   cache_seqlens (after rotary on k_new)
  TensorView cache_seqlens;      // optional int32 (batch): tokens already in the cache;
                                 //   absent = the whole cache (seqlen_cache) is used
  TensorView cache_batch_idx;    // optional int32 (batch): cache row of each batch entry
  TensorView cache_leftpad;      // optional int32 (batch): sequence b starts at cache position
                                 //   cache_leftpad[b] (left padding); its keys are positions
                                 //   [cache_leftpad[b], cache_seqlens[b] + seqlen_new), and rotary
                                 //   positions stay the cache positions, as in flash_attn
  TensorView block_table;        // optional int32 (batch, max_blocks_per_seq): paged cache.
                                 //   Sequences may share pages they only read (prefix sharing);
                                 //   with k_new, a page keys are appended into must not be shared
                                 //   (InvalidArgument). Checked for host tables only: a CUDA
                                 //   block_table cannot be read on the host, and sharing a page
                                 //   that is appended into gives undefined results there.
  TensorView rotary_cos, rotary_sin;  // optional (seqlen_ro, rotary_dim / 2), dtype of q
  bool rotary_interleaved = false;    // true: GPT-J pairs (0,1),(2,3)...; false: NeoX halves
  TensorView out;                // required (batch, seqlen_q, heads_q, head_dim_v), varlen
                                 //   (total_q, heads_q, head_dim_v); dtype of q (fp8 inputs:
                                 //   bfloat16 or float16)
  TensorView softmax_lse;        // optional float32 (batch, heads_q, seqlen_q), varlen (heads_q, total_q)
  int num_splits = 0;            // 0 = the library chooses
};

struct CombineParams {
  TensorView out_partial;  // float32 (splits, batch, seqlen, heads, d) or (splits, total, heads, d)
  TensorView lse_partial;  // float32 (splits, batch, heads, seqlen)   or (splits, heads, total)
  TensorView out;          // (batch, seqlen, heads, d) or (total, heads, d); f32, f16 or bf16
  TensorView softmax_lse;  // optional float32 (batch, heads, seqlen) or (heads, total)
  void* stream = nullptr;
  WorkspaceAllocator workspace;  // as in AttnOptions
  Backend backend = Backend::Auto;
};

// The dropout keep-mask every backend applies, for tests: mask[b][h][i][j] = 1 where the
// attention weight of query row i and key j survives. uint8 (batch, heads, seqlen_q, seqlen_k).
struct DropoutMaskParams : DropoutArgs {
  TensorView mask;
};

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------
Status fwd(const FwdParams& params);
Status bwd(const BwdParams& params);
Status fwd_kvcache(const KvCacheParams& params);
Status combine(const CombineParams& params);
Status dropout_mask(const DropoutMaskParams& params);

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------
struct DeviceInfo {
  bool cuda_built = false;  // the library was compiled with CUDA
  int device_count = 0;     // CUDA devices visible (0 without a GPU or a driver)
  int device = -1;          // the device described below, or -1
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  std::size_t global_memory_bytes = 0;
  std::size_t smem_per_block_optin = 0;
  std::size_t l2_bytes = 0;
};
DeviceInfo device_info(int device = 0);
const char* version();

// CPU backend controls and accounting.
// Threads of later calls (a running call keeps its count): 0 = all hardware threads; at most
// max(64, 4 x the hardware threads), else an InvalidArgument error naming 'threads'.
Status set_cpu_threads(int threads);
int cpu_threads();  // what calls use now (0 resolved to the hardware threads)
struct WorkspaceStats {
  std::size_t current_bytes = 0;
  std::size_t peak_bytes = 0;
};
WorkspaceStats cpu_workspace_stats();  // bytes the CPU backend allocated for its own scratch
void reset_cpu_workspace_peak();

}  // namespace flashattn
