// The FA3 forward's entry: which calls it covers (check), the tensor maps of a call, and the
// dispatch to the head-dim translation units (fwd_hdim*.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "fa3/fa3_backend.h"
#include "fa3/fwd_launch.cuh"
#include "fa3/launch_common.h"

namespace flashattn::fa3 {
namespace {

Status unsupported(const std::string& why) { return Status::error(ErrorCode::Unsupported, "q", "fa3 fwd: " + why); }

}  // namespace

Status make_fwd_maps(const AttnProblem& p, int block_m, int block_n, bool tma_store_o, FwdMaps* maps, int swizzle_bytes) {
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  const int64_t query_rows = std::max<int64_t>(varlen ? p.lens.total_q : p.lens.seqlen_q, 1);
  if (Status st = map_rows(&maps->q, p.q, p.dtype, p.head_dim, p.heads_q, query_rows, p.batch, uint32_t(block_m), swizzle_bytes);
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
  if (Status st = map_rows(&maps->k, k_view, p.dtype, p.head_dim, p.heads_k, key_rows, p.batch, uint32_t(block_n), swizzle_bytes);
      !st.ok())
    return st;
  if (Status st = map_rows(&maps->v, v_view, p.dtype, p.head_dim_v, p.heads_k, key_rows, p.batch, uint32_t(block_n), swizzle_bytes);
      !st.ok())
    return st;
  // O by TMA stores where the plan takes them (dense calls, FwdPlan::tma_store_o) and the map can
  // be built (the API's alignment rules make it so); else stores from registers.
  maps->o_by_tma = 0;
  if (tma_store_o &&
      map_rows(&maps->o, p.out, p.out_dtype, p.head_dim_v, p.heads_q, query_rows, p.batch, uint32_t(block_m)).ok())
    maps->o_by_tma = 1;
  return {};
}

Status check(const AttnProblem& p) {
  if (p.dtype == DType::F8E4M3)
    return kFp8FwdEnabled ? check_fp8(p)
                          : unsupported("has float8_e4m3fn kernels that are built but not yet validated on a GPU (the CPU backend runs fp8)");
  if (p.dtype != DType::F16 && p.dtype != DType::BF16) return unsupported("takes float16 or bfloat16");
  if (p.out_dtype != p.dtype) return unsupported("writes out in the dtype of q");
  const int d = kernel_head_dim(p.head_dim), dv = kernel_head_dim(p.head_dim_v);
  if (d != dv && !(d == 192 && dv == 128))
    return unsupported("head_dim and head_dim_v in the same size class (<= 64, <= 128, <= 192, <= 256), or <= 192 with <= 128, got " +
                       std::to_string(p.head_dim) + " / " + std::to_string(p.head_dim_v));
  if (p.lens.cache_seqlens != nullptr || p.k.block_table != nullptr || p.k.batch_index != nullptr)
    return unsupported("takes (batch, seqlen, heads, dim) or varlen tensors (no KV cache or pages yet)");
  if (p.dropout_p > 0.f) return unsupported("has no dropout");
  if (p.num_splits > 1) return unsupported("has no split-KV yet");
  // The scheduler numbers work tiles (64-row blocks at most) in 32 bits, with room for a stride.
  if ((p.lens.seqlen_q + 63) / 64 * p.heads_q * p.batch >= (int64_t(1) << 30))
    return unsupported("at most 2^30 (64-row block, head, sequence) work tiles");
  // The kernel's mask works in 32 bits on windows narrowed to these bounds (fwd_softmax.cuh):
  // rows + keys + a kBlockM row block.
  if (const SeqlenBounds bounds = seqlen_bounds(p); bounds.q + bounds.k >= (int64_t(1) << 31) - 256)
    return unsupported("query rows + key rows below 2^31 - 256");
  return {};
}

Status fwd(const AttnProblem& p, void* stream, const FwdPlan* forced_plan) {
  if (Status st = require_sm90("fa3 fwd"); !st.ok()) return st;
  if (kFp8FwdEnabled && p.dtype == DType::F8E4M3) return fwd_fp8(p, stream);
  if (Status st = check(p); !st.ok()) return st;
  const auto s = static_cast<cudaStream_t>(stream);
  AttnProblem clamped = p;
  const SeqlenBounds bounds = seqlen_bounds(p);
  clamped.mask = clamp_windows(p.mask, bounds.q, bounds.k);
  const FwdPlan plan = forced_plan != nullptr ? *forced_plan : fwd_plan(clamped);
  if (Status st = check_fwd_plan(plan, clamped); !st.ok()) return st;
  switch (plan.head_dim) {
    case 64: return fwd_hdim64(clamped, plan, s);
    case 128: return fwd_hdim128(clamped, plan, s);
    case 192: return fwd_hdim192(clamped, plan, s);
    default: return fwd_hdim256(clamped, plan, s);
  }
}

}  // namespace flashattn::fa3
