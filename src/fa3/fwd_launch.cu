// Builds the tensor maps for one FA3 forward call and launches the kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "arch/sm90/tensor_map.h"
#include "fa3/fa3_backend.h"
#include "fa3/fwd_kernel.cuh"

namespace flashattn::fa3 {
namespace {

Status unsupported(const std::string& why) { return Status::error(ErrorCode::Unsupported, "q", "fa3 fwd: " + why); }

// (head_dim, heads, seqlen, batch) with a 64 x 1 x rows x 1 box. Varlen (cu_seqlens set): all
// `seqlen` rows as one sequence (batch extent 1); the kernel adds cu_seqlens[b] to the row.
Status map_rows(CUtensorMap* map, const RowsView& view, DType dtype, int64_t dim, int64_t heads, int64_t seqlen,
                int64_t batch, uint32_t box_rows) {
  const bool varlen = view.cu_seqlens != nullptr;
  sm90::TensorMapShape shape;
  shape.rank = 4;
  shape.sizes[0] = uint64_t(dim);
  shape.sizes[1] = uint64_t(heads);
  shape.sizes[2] = uint64_t(seqlen);
  shape.sizes[3] = uint64_t(varlen ? 1 : batch);
  shape.strides_bytes[0] = uint64_t(view.head_stride) * 2;
  shape.strides_bytes[1] = uint64_t(view.row_stride) * 2;
  // With one sequence the batch stride is never stepped; it only has to be a valid stride.
  shape.strides_bytes[2] = uint64_t(varlen ? view.row_stride * seqlen : view.batch_stride) * 2;
  shape.box[0] = 64;
  shape.box[1] = 1;
  shape.box[2] = box_rows;
  shape.box[3] = 1;
  return sm90::encode_tensor_map_sw128(map, view.data, dtype, shape);
}

// Ping-pong (both head dims; measured on the H200: +8 % at d128, +1 % at d64, docs/PERF.md).
// FLASHATTN_FA3_PINGPONG=0 turns it off (tools/gpu/fa3_variants.sh compares). Read once per process.
bool fwd_pingpong() {
  static const bool on = [] {
    const char* v = std::getenv("FLASHATTN_FA3_PINGPONG");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

template <typename Config>
Status launch(const AttnProblem& p, cudaStream_t stream) {
  // Nothing to compute (and a zero extent would make the tensor-map encode fail): return first.
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (row_blocks == 0 || p.batch == 0 || p.heads_q == 0) return {};
  FwdMaps maps;
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  const int64_t query_rows = varlen ? p.lens.total_q : p.lens.seqlen_q;
  if (Status st = map_rows(&maps.q, p.q, p.dtype, p.head_dim, p.heads_q, std::max<int64_t>(query_rows, 1), p.batch,
                           Config::kBlockM);
      !st.ok())
    return st;
  // cuTensorMapEncodeTiled rejects a zero globalDim (cuda.h: "must be non-zero"). With no keys
  // (seqlen_k = 0) the kernel issues no K/V loads (visible_keys is empty: O = 0, LSE = -inf), so
  // a one-row extent only keeps the encode from failing; it is never read.
  const int64_t key_rows = std::max<int64_t>(varlen ? p.lens.total_k : p.lens.seqlen_k, 1);
  // An empty K/V may come with a null base; the map then points at q (never read through it).
  RowsView k_view = p.k, v_view = p.v;
  if (k_view.data == nullptr) k_view.data = p.q.data;
  if (v_view.data == nullptr) v_view.data = p.q.data;
  if (Status st = map_rows(&maps.k, k_view, p.dtype, p.head_dim, p.heads_k, key_rows, p.batch, Config::kBlockN); !st.ok())
    return st;
  if (Status st = map_rows(&maps.v, v_view, p.dtype, p.head_dim_v, p.heads_k, key_rows, p.batch, Config::kBlockN); !st.ok())
    return st;
  auto kernel = fwd_kernel<Config>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Config::kSmemBytes);
  if (err != cudaSuccess) return Status::error(ErrorCode::CudaError, "", std::string("fa3 fwd: ") + cudaGetErrorString(err));
  kernel<<<dim3(unsigned(row_blocks), unsigned(p.heads_q), unsigned(p.batch)), Config::kThreads, Config::kSmemBytes, stream>>>(
      maps, p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return Status::error(ErrorCode::CudaError, "", std::string("fa3 fwd: launch: ") + cudaGetErrorString(err));
  return {};
}

template <typename Element>
Status dispatch(const AttnProblem& p, cudaStream_t stream) {
  const bool general = !p.plain_forward_scores();  // FwdConfig::kGeneralScore
  const bool pingpong = !general && fwd_pingpong();
  if (p.head_dim == 64) {
    if (general) return launch<FwdConfig<Element, 64, 128, 2, true, false>>(p, stream);
    if (pingpong) return launch<FwdConfig<Element, 64, 128, 2, false, true>>(p, stream);
    return launch<FwdConfig<Element, 64, 128, 2, false, false>>(p, stream);
  }
  if (general) return launch<FwdConfig<Element, 128, 128, 2, true, false>>(p, stream);
  if (pingpong) return launch<FwdConfig<Element, 128, 128, 2, false, true>>(p, stream);
  return launch<FwdConfig<Element, 128, 128, 2, false, false>>(p, stream);
}

}  // namespace

Status check(const AttnProblem& p) {
  if (p.dtype != DType::F16 && p.dtype != DType::BF16) return unsupported("takes float16 or bfloat16");
  if (p.out_dtype != p.dtype) return unsupported("writes out in the dtype of q");
  if (p.head_dim != p.head_dim_v || (p.head_dim != 64 && p.head_dim != 128))
    return unsupported("head_dim = head_dim_v in {64, 128} only, got " + std::to_string(p.head_dim) + " / " +
                       std::to_string(p.head_dim_v));
  if (p.lens.cache_seqlens != nullptr || p.k.block_table != nullptr || p.k.batch_index != nullptr)
    return unsupported("takes (batch, seqlen, heads, dim) or varlen tensors (no KV cache or pages yet)");
  if (p.dropout_p > 0.f) return unsupported("has no dropout");
  if (p.num_splits > 1) return unsupported("has no split-KV yet");
  if (p.batch > 65535 || p.heads_q > 65535) return unsupported("at most 65535 sequences and heads");
  return {};
}

Status fwd(const AttnProblem& p, void* stream) {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return Status::error(ErrorCode::CudaError, "", "fa3 fwd: cannot read the device");
  if (major != 9) return unsupported("needs an sm90 GPU");
  if (Status st = check(p); !st.ok()) return st;
  const auto s = static_cast<cudaStream_t>(stream);
  return p.dtype == DType::F16 ? dispatch<__half>(p, s) : dispatch<__nv_bfloat16>(p, s);
}

}  // namespace flashattn::fa3
