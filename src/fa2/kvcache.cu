// fwd_kvcache on the device: rotary on k_new (at its absolute position) and append k_new/v_new into
// the cache, rotary on q into a workspace, then the FA2 forward over the cache.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "arch/sm90/grid_dependency.cuh"
#include "common/kvcache_problem.h"
#include "common/numeric.h"
#include "common/cuda_status.h"
#include "fa2/fa2_backend.h"

namespace flashattn::fa2 {
namespace {

__device__ __forceinline__ float load_as(const void* base, int64_t i, DType dtype) {
  return dtype == DType::F16 ? numeric::fp16_to_float(static_cast<const uint16_t*>(base)[i])
                             : numeric::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
}
__device__ __forceinline__ void store_as(void* base, int64_t i, DType dtype, float x) {
  static_cast<uint16_t*>(base)[i] = dtype == DType::F16 ? numeric::float_to_fp16(x) : numeric::float_to_bf16(x);
}

// Element c of row `src` rotated at position pos (the same pairing and arithmetic as the CPU
// backend: x1 cos - x2 sin, x1 sin + x2 cos); elements past rotary_dim are copied.
__device__ __forceinline__ float rotated_element(const RotaryParams& r, DType dtype, const void* src, int64_t src_offset,
                                                 int64_t pos, int64_t c) {
  const float x = load_as(src, src_offset + c, dtype);
  if (c >= r.rotary_dim) return x;
  const int64_t half = r.rotary_dim / 2;
  int64_t k, i1, i2;
  if (r.interleaved) {
    k = c / 2;
    i1 = 2 * k;
    i2 = 2 * k + 1;
  } else {
    k = c < half ? c : c - half;
    i1 = k;
    i2 = k + half;
  }
  // Positions past the tables (garbage cache_seqlens on a GPU) read their ends instead.
  if (r.seqlen_ro <= 0) return x;
  pos = pos < 0 ? 0 : pos < r.seqlen_ro ? pos : r.seqlen_ro - 1;
  const float cs = load_as(r.cos, pos * r.row_stride + k, dtype);
  const float sn = load_as(r.sin, pos * r.row_stride + k, dtype);
  const float x1 = load_as(src, src_offset + i1, dtype), x2 = load_as(src, src_offset + i2, dtype);
  return c == i1 ? x1 * cs - x2 * sn : x1 * sn + x2 * cs;
}

// One block per (new token t, sequence b); threads stride over (kv head, element).
__global__ void append_kernel(const KvCacheProblem kp) {
  sm90::launch_dependent_grids();  // the attention kernel may launch; it waits for these writes
  const AttnProblem& p = kp.attn;
  const int64_t t = blockIdx.x, b = blockIdx.y;
  if (!kp.new_key_fits(b, t)) return;  // (garbage cache_seqlens only)
  const int64_t pos = kp.first_new_position(b) + t, key = kp.new_key_row(b, t);
  const int64_t width = p.heads_k * (p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v);
  for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
    const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
    const int64_t hk = e / dim, c = e % dim;
    if (c < p.head_dim) {
      const float x = kp.rotary.rotary_dim > 0
                          ? rotated_element(kp.rotary, p.dtype, kp.k_new.data, kp.k_new.offset(b, t, hk), pos, c)
                          : load_as(kp.k_new.data, kp.k_new.offset(b, t, hk) + c, p.dtype);
      store_as(p.k.data, p.k.offset(b, key, hk) + c, p.dtype, x);
    }
    if (c < p.head_dim_v)
      store_as(p.v.data, p.v.offset(b, key, hk) + c, p.dtype, load_as(kp.v_new.data, kp.v_new.offset(b, t, hk) + c, p.dtype));
  }
}

// One block per (query row i, sequence b): q rotated into a dense (batch, seqlen_q, heads_q, d) copy.
__global__ void rotate_q_kernel(const KvCacheProblem kp, void* q_rotated) {
  sm90::launch_dependent_grids();  // the attention kernel may launch; it waits for these writes
  const AttnProblem& p = kp.attn;
  const int64_t i = blockIdx.x, b = blockIdx.y;
  if (i >= p.lens.q(b)) return;  // varlen: past this sequence's rows
  const int64_t pos = kp.first_new_position(b) + (kp.rotary_q_per_row ? i : 0);
  for (int64_t e = threadIdx.x; e < p.heads_q * p.head_dim; e += blockDim.x) {
    const int64_t h = e / p.head_dim, c = e % p.head_dim;
    const float x = rotated_element(kp.rotary, p.dtype, p.q.data, p.q.offset(b, i, h), pos, c);
    store_as(q_rotated, ((b * p.lens.seqlen_q + i) * p.heads_q + h) * p.head_dim + c, p.dtype, x);
  }
}

}  // namespace

Status fwd_kvcache(const KvCacheProblem& kp, void* stream_handle, const FwdPlan* plan) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  if (kp.attn.dtype != DType::F16 && kp.attn.dtype != DType::BF16)
    return Status::error(ErrorCode::Unsupported, "q",
                         std::string("argument 'q': the fa2 kernels take float16 or bfloat16 (float8_e4m3fn runs "
                                     "on the CPU backend; the FA3 fp8 kernels are not yet validated on a GPU), got ") +
                             dtype_name(kp.attn.dtype));
  AttnProblem p = kp.attn;
  if (p.batch > 65535 || kp.seqlen_new > 0x7fffffff || p.lens.seqlen_q > 0x7fffffff)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd_kvcache: more than 65535 sequences per call");
  if (kp.k_new.data != nullptr && kp.seqlen_new > 0 && p.batch > 0) {
    append_kernel<<<dim3(unsigned(kp.seqlen_new), unsigned(p.batch)), 256, 0, stream>>>(kp);
    FLASHATTN_CUDA_CHECK("fa2 fwd_kvcache: append launch", cudaGetLastError());
  }
  StreamBuffer q_rotated(stream);
  if (kp.rotary.rotary_dim > 0 && p.batch > 0 && p.lens.seqlen_q > 0) {
    const size_t bytes = size_t(p.batch * p.lens.seqlen_q * p.heads_q * p.head_dim) * 2;
    if (Status st = q_rotated.allocate(bytes, "fa2: allocating workspace"); !st.ok()) return st;
    rotate_q_kernel<<<dim3(unsigned(p.lens.seqlen_q), unsigned(p.batch)), 256, 0, stream>>>(kp, q_rotated.as<void>());
    FLASHATTN_CUDA_CHECK("fa2 fwd_kvcache: rotary launch", cudaGetLastError());
    RowsView dense;
    dense.data = q_rotated.as<void>();
    dense.head_stride = p.head_dim;
    dense.row_stride = p.heads_q * p.head_dim;
    dense.batch_stride = p.lens.seqlen_q * p.heads_q * p.head_dim;
    p.q = dense;
  }
  return fwd(p, stream, plan);
}

}  // namespace flashattn::fa2
