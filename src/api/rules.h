// The validation rules, one function per rule. Each returns ok or an error naming the argument,
// the rule and the offending value:  argument 'k': <rule>, got <value>
// validate.cpp composes them into the checks of each entry point; the order there matters only
// in that a rule may assume the ones before it passed (a content check assumes dtype int32, a
// contiguous layout and a non-null pointer).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashattn/flashattn.h"

// Returns the Status of expr from the enclosing function when it is an error.
#define FA_CHECK(expr)                                   \
  do {                                                   \
    if (Status fa_status_ = (expr); !fa_status_.ok()) {  \
      return fa_status_;                                 \
    }                                                    \
  } while (0)

namespace flashattn::api {

// ---------------------------------------------------------------------------------------------
// Building errors and printing values
// ---------------------------------------------------------------------------------------------
Status invalid_argument(std::string_view argument, std::string_view rule, std::string_view got);
Status unsupported(std::string_view argument, std::string_view reason);

std::string shape_string(const TensorView& t);    // "[2, 16, 4, 64]"
std::string strides_string(const TensorView& t);  // "[4096, 256, 64, 1]"
std::string device_string(DeviceType device, int index);  // "cpu", "cuda:1"
std::string device_string(const TensorView& t);
std::string float_string(float value);

// ---------------------------------------------------------------------------------------------
// A view is well formed: readable shape and strides, sizes that fit in int64. Every given view
// passes these first, so later rules can compute spans and offsets without overflow.
// ---------------------------------------------------------------------------------------------
Status check_view_ndim(const TensorView& t, std::string_view name);        // ndim in [0, 5]
Status check_known_dtype(const TensorView& t, std::string_view name);      // a DType enumerator
Status check_known_device(const TensorView& t, std::string_view name);     // Cpu or Cuda, index >= 0
Status check_shape_non_negative(const TensorView& t, std::string_view name);
Status check_strides_non_negative(const TensorView& t, std::string_view name);
Status check_size_fits_int64(const TensorView& t, std::string_view name);  // numel, bytes, address
Status check_well_formed(const TensorView& t, std::string_view name);      // all of the above

// ---------------------------------------------------------------------------------------------
// Presence
// ---------------------------------------------------------------------------------------------
Status check_defined(const TensorView& t, std::string_view name);
// Both or neither of two optional tensors (k_new/v_new, rotary_cos/rotary_sin, cu_seqlens_q/k).
Status check_paired(const TensorView& a, std::string_view a_name, const TensorView& b,
                    std::string_view b_name);
// `t` is required because `other` is given (cache_seqlens when k_new is given).
Status check_required_with(const TensorView& t, std::string_view name, const TensorView& other,
                           std::string_view other_name);
// `t` must be absent when `other` is given (cache_batch_idx with block_table).
Status check_absent_with(const TensorView& t, std::string_view name, const TensorView& other,
                         std::string_view other_name);
Status check_data(const TensorView& t, std::string_view name);  // non-null when numel > 0

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------
Status check_dtype(const TensorView& t, std::string_view name, DType expected);
// q, k, v: float16, bfloat16, float32 or float8_e4m3fn (backends say which they run).
Status check_attention_dtype(const TensorView& t, std::string_view name);
Status check_dtype_matches(const TensorView& t, std::string_view name, DType reference,
                           std::string_view reference_name);
// Outputs: the inputs' dtype (bfloat16 or float16 for fp8 inputs), or float32 where the caller
// allows it (the reference in tests).
Status check_output_dtype(const TensorView& t, std::string_view name, DType input_dtype,
                          bool allow_f32);
// combine's out: float32, float16 or bfloat16.
Status check_float_output_dtype(const TensorView& t, std::string_view name);

// ---------------------------------------------------------------------------------------------
// FP8 (float8_e4m3fn inputs)
// ---------------------------------------------------------------------------------------------
// A descale (q_descale, k_descale, v_descale) only with fp8 inputs: with others it would be
// silently ignored (as FlashAttention-3 does), which hides a caller's mistake.
Status check_descale_needs_fp8(const TensorView& descale, std::string_view name, DType input_dtype);
// fp8 attention is forward-only (for inference): no dropout, no backward (Unsupported naming q).
Status check_fp8_no_dropout(float dropout_p);
Status check_fp8_has_no_backward(const TensorView& q);
// fwd_kvcache: no rotary with fp8 inputs.
Status check_fp8_no_rotary(const TensorView& rotary_cos);

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------
// layout names the dimensions for the message, e.g. "(batch, seqlen_q, heads_q, head_dim)".
Status check_ndim(const TensorView& t, std::string_view name, int expected, std::string_view layout);
// One expected dimension: its size and where that size comes from ("the batch of q").
struct DimSpec {
  int64_t size;
  std::string_view meaning;
};
Status check_dim(const TensorView& t, std::string_view name, int dim, const DimSpec& expected);
// Every dimension (ndim must already match).
Status check_shape(const TensorView& t, std::string_view name, std::initializer_list<DimSpec> dims);
// Same shape as another tensor (dq like q, dout like out).
Status check_same_shape(const TensorView& t, std::string_view name, const TensorView& reference,
                        std::string_view reference_name);
// Every dimension within int32: kernels index rows, heads and sequence positions with int.
Status check_dims_fit_int32(const TensorView& t, std::string_view name);
Status check_head_dim(int64_t head_dim, std::string_view name, std::string_view what);
Status check_heads_positive(int64_t heads, std::string_view name, std::string_view what);
Status check_gqa(int64_t heads_q, int64_t heads_k, std::string_view name);
// alibi_slopes: (heads_q) or (batch, heads_q).
Status check_alibi_shape(const TensorView& alibi, int64_t batch, int64_t heads_q);

// ---------------------------------------------------------------------------------------------
// Layout and placement
// ---------------------------------------------------------------------------------------------
// Layout rules pass any strides on a view without elements (numpy reports 0 strides for them).
Status check_last_dim_contiguous(const TensorView& t, std::string_view name);
Status check_contiguous(const TensorView& t, std::string_view name);
// Vectorized: tensors the GPU kernels load in 16-byte vectors (q, k, v, out, gradients, caches):
// on CUDA the pointer and every outer stride must be 16-byte multiples. Element: only the
// natural alignment of the dtype (lse, index tensors, slopes, rotary tables).
enum class Alignment { Vectorized, Element };
Status check_alignment(const TensorView& t, std::string_view name, Alignment kind);
Status check_same_device(const TensorView& t, std::string_view name, const TensorView& reference,
                         std::string_view reference_name);
// One stride serves both tensors (rotary_sin must be laid out like rotary_cos).
Status check_same_strides(const TensorView& t, std::string_view name, const TensorView& reference,
                          std::string_view reference_name);
Status check_host(const TensorView& t, std::string_view name, std::string_view why);
// An output whose elements alias one another (a stride of 0, interleaved strides) would be
// written twice by different threads.
Status check_no_self_overlap(const TensorView& t, std::string_view name);
// No byte of `output` may be a byte of `other` (another output, or an input it would clobber).
Status check_no_overlap(const TensorView& output, std::string_view output_name,
                        const TensorView& other, std::string_view other_name);

// ---------------------------------------------------------------------------------------------
// Sequence lengths (contents are read only for host tensors: CUDA kernels clamp instead)
// ---------------------------------------------------------------------------------------------
// At least one entry (batch + 1 >= 1).
Status check_cu_seqlens_length(const TensorView& cu, std::string_view name);
// cu[0] == 0, non-decreasing, cu[batch] <= total_rows. `rows_name` names total_rows ("rows of q").
Status check_cu_seqlens_contents(const TensorView& cu, std::string_view name, int64_t batch,
                                 int64_t total_rows, std::string_view rows_name);
// seqused_k[b] in [0, key_length(b)]: key lengths from cu_seqlens_k (or one dense length).
Status check_seqused_contents(const TensorView& seqused, std::string_view name, int64_t batch,
                              const int32_t* cu_seqlens_k, int64_t dense_seqlen_k);
// max_seqlen: >= 0 (0 = derive), and when given and the lengths are known, >= the longest.
Status check_max_seqlen_value(int value, std::string_view name);
Status check_max_seqlen_bound(int value, std::string_view name, int64_t longest);
// 0 = derive from host cu_seqlens: impossible when they live on the GPU.
Status check_max_seqlen_derivable(int value, std::string_view name, const TensorView& cu,
                                  std::string_view cu_name);

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------
Status check_window(int value, std::string_view name);  // >= -1
Status check_softcap(float softcap);                    // finite, >= 0
Status check_softmax_scale(const std::optional<float>& scale);  // finite when given
Status check_dropout(float dropout_p);                  // in [0, 1)
Status check_num_splits(int num_splits);                // in [0, 256]
Status check_backend(Backend backend);                  // a Backend enumerator
Status check_workspace(const WorkspaceAllocator& workspace);  // allocate and release given together
// set_cpu_threads: in [0, max_threads] (0 = all hardware threads).
Status check_cpu_threads(int threads, int max_threads);

// ---------------------------------------------------------------------------------------------
// KV cache
// ---------------------------------------------------------------------------------------------
Status check_page_size(int64_t page_size, std::string_view name = "k_cache");  // >= 1
// A paged k/v in fwd comes with the varlen layout (cu_seqlens give the key lengths).
Status check_paged_needs_varlen(bool varlen);
// cu_seqlens_k of a paged k/v: starts at 0, non-decreasing, no sequence longer than a table row
// holds (capacity = max_blocks_per_seq * page_size). Host tensors only.
Status check_paged_seqlens_contents(const TensorView& cu_seqlens_k, int64_t batch, int64_t capacity);
// max_seqlen_k <= capacity: the kernels read that many positions through the table.
Status check_paged_max_seqlen(int max_seqlen_k, int64_t capacity);
// A dense cache without cache_batch_idx holds sequence b in row b.
Status check_cache_rows(int64_t batch_cache, int64_t batch);
// cache rows + appended keys within the cache: capacity fits int32.
Status check_cache_capacity(int64_t capacity, std::string_view name, std::string_view how);
// cache_seqlens[b] >= 0 and cache_seqlens[b] + seqlen_new <= capacity.
Status check_cache_seqlens_contents(const TensorView& cache_seqlens, int64_t batch,
                                    int64_t seqlen_new, int64_t capacity);
// Entries in [0, batch_cache); distinct when the call appends (two sequences, one cache row).
Status check_cache_batch_idx_contents(const TensorView& index, int64_t batch, int64_t batch_cache,
                                      bool must_be_distinct);
// 0 <= cache_leftpad[b] <= cache_seqlens[b] (the capacity without cache_seqlens): a sequence
// starts at or before its end.
Status check_cache_leftpad_contents(const TensorView& leftpad, int64_t batch, const int32_t* cache_seqlens,
                                    int64_t capacity);
// Positions [begin, end) of one sequence that a call reads or writes.
struct PositionRange {
  int64_t begin = 0, end = 0;
};
// The pages covering each sequence's used positions name existing blocks (the rest of a row may
// hold anything, e.g. -1). `used` has one range per row of the table; host tables only.
Status check_block_table_contents(const TensorView& block_table, int64_t num_blocks, int64_t page_size,
                                  const std::vector<PositionRange>& used, std::string_view cache_name);
// Appending (seqlen_new > 0): a page that new keys are written into appears once among the pages
// in use, else two sequences would write one page, or one would read keys another is writing.
// Pages without new keys may be shared (prefix sharing). Host tables only (after the contents check).
Status check_block_table_writes(const TensorView& block_table, int64_t batch, int64_t page_size,
                                const int32_t* cache_seqlens, int64_t seqlen_new);
Status check_rotary_dim(int64_t rotary_dim, int64_t head_dim);  // in [2, head_dim], even
// The table covers every position used: cache_seqlens[b] + seqlen_new keys, and q's positions.
// q's rows: seqlen_q each, or cu_seqlens_q's (host) lengths when given.
Status check_rotary_length(int64_t seqlen_ro, int64_t batch, const int32_t* cache_seqlens,
                           int64_t seqlen_new, int64_t seqlen_q, const int32_t* cu_seqlens_q, bool q_per_row);
Status check_splits(int64_t splits, std::string_view name);  // combine: >= 1

}  // namespace flashattn::api
