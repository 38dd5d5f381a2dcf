// The FA3 backward's entry: which calls it covers (check_bwd), its tile plan (bwd_plan), the
// workspaces, and the three kernels on the caller's stream: row statistics (D, LSE * log2 e),
// the main kernel (bwd_hdim*.cu), the dQ conversion. No host synchronisation.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/cuda_status.h"
#include "cuda/bwd_convert_dq.cuh"
#include "cuda/bwd_row_stats.cuh"
#include "cuda/unused_key_grads.h"
#include "fa3/bwd_dq_layout.h"
#include "fa3/bwd_launch.cuh"
#include "fa3/fa3_backend.h"
#include "fa3/launch_common.h"
#include "fa3/tile_order.h"

namespace flashattn::fa3 {
namespace {

Status unsupported(const char* argument, const std::string& why) {
  return Status::error(ErrorCode::Unsupported, argument, "fa3 bwd: " + why);
}

// Row padding of the workspaces: a multiple of every block_m, so row blocks never leave them.
constexpr int64_t kRowAlign = 128;

// The deterministic mode's sections (BwdPlan::section_mb).
constexpr int kBwdDeterministicSectionMb = 16;

// The most bytes of Q, dO and fp32 dQ rows per query head for which d256 staggers its row walks.
constexpr int64_t kBwdStaggerHeadBytes = int64_t(8) << 20;

// The head dim the backward runs a call at: 64, 128, or 256 (d192 padded: its 96-column halves
// would split the 64-column blocks that the wide kernel's warpgroups take).
int bwd_head_dim(int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

// The FA3 dQ accumulator's slabs for the shared conversion (cuda/bwd_convert_dq.cuh).
struct DqSlabLayout {
  int chunk_cols;
  __device__ __forceinline__ DqQuad quad(int f, int) const { return dq_slab_quad(f, chunk_cols); }
};

template <typename Element>
Status run_kernels(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  const AttnProblem& p = args.problem.fwd;
  // The row statistics kernel also zeroes the dQ accumulator (its 64-row slabs are contiguous).
  FLASHATTN_CUDA_CHECK("fa3 bwd: preprocess kernel launch",
                       gpu::launch_bwd_row_stats<Element>(args.problem,
                                                          {const_cast<float*>(args.lse_log2), const_cast<float*>(args.delta),
                                                           args.rows_padded, args.dq_accum, plan.head_dim},
                                                          stream));
  const Status st = plan.head_dim == 64    ? bwd_hdim64(args, plan, stream)
                    : plan.head_dim == 128 ? bwd_hdim128(args, plan, stream)
                                           : bwd_hdim256(args, plan, stream);
  if (!st.ok()) return st;
  // The dQ workspace's chunk width, from the configurations the plan selects (bwd_hdim*.cu).
  const int chunk_cols = plan.head_dim == 64    ? BwdConfig<Element, 64, 64, false>::kDqCols
                         : plan.head_dim == 128 ? BwdConfig<Element, 128, 64, false>::kDqCols
                                                : BwdConfig<Element, 256, 64, false>::kDqCols;
  const float dq_scale = plan.general_score ? 1.f : p.score.scale;
  FLASHATTN_CUDA_CHECK("fa3 bwd: dq convert kernel launch",
                       gpu::launch_bwd_convert_dq<Element>(args.problem, args.dq_accum, args.rows_padded, plan.head_dim,
                                                           DqSlabLayout{chunk_cols}, dq_scale, stream));
  return {};
}

}  // namespace

int bwd_section_shift(const BwdProblem& problem, const BwdPlan& plan, int64_t rows_padded, int64_t key_blocks, int sms) {
  const AttnProblem& p = problem.fwd;
  const int64_t groups = p.batch * p.heads_k;
  if (key_blocks * groups >= (int64_t(1) << 31)) return 0;
  if (plan.section_mb <= 0) return plan.section_per_wave ? section_shift_for(groups, sms / std::max<int64_t>(key_blocks, 1)) : 0;
  // A group's share of L2 over its CTAs' lifetime: its query heads' Q and dO rows and fp32 dQ rows.
  const int64_t group_bytes =
      (p.heads_q / p.heads_k) * rows_padded * (2 * (p.head_dim + p.head_dim_v) + 4 * int64_t(plan.head_dim));
  return section_shift_for(groups, int64_t(plan.section_mb) * (1 << 20) / std::max<int64_t>(group_bytes, 1));
}

Status make_bwd_maps(const BwdProblem& bp, const BwdPlan& plan, int block_m, int block_n, BwdMaps* maps) {
  const AttnProblem& p = bp.fwd;
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  const int64_t query_rows = std::max<int64_t>(varlen ? p.lens.total_q : p.lens.seqlen_q, 1);
  const int64_t key_rows = std::max<int64_t>(varlen ? p.lens.total_k : p.lens.seqlen_k, 1);
  if (Status st = map_rows(&maps->q, p.q, p.dtype, p.head_dim, p.heads_q, query_rows, p.batch, uint32_t(block_m)); !st.ok()) return st;
  if (Status st = map_rows(&maps->dout, bp.dout, p.dtype, p.head_dim_v, p.heads_q, query_rows, p.batch, uint32_t(block_m)); !st.ok())
    return st;
  // An empty K/V may come with a null base; the map then points at q (never read through it:
  // without keys the kernel has no steps).
  RowsView k_view = p.k, v_view = p.v;
  if (k_view.data == nullptr) k_view.data = p.q.data;
  if (v_view.data == nullptr) v_view.data = p.q.data;
  if (Status st = map_rows(&maps->k, k_view, p.dtype, p.head_dim, p.heads_k, key_rows, p.batch, uint32_t(block_n)); !st.ok()) return st;
  if (Status st = map_rows(&maps->v, v_view, p.dtype, p.head_dim_v, p.heads_k, key_rows, p.batch, uint32_t(block_n)); !st.ok()) return st;
  // dK and dV by TMA stores where the plan takes them and the maps can be built; varlen blocks
  // would write past their sequence into the next one's rows (the map clips only at its end).
  maps->dkv_by_tma = 0;
  if (plan.tma_store_dkv && !varlen && p.lens.cu_seqlens_k == nullptr && p.lens.seqlen_k > 0 &&
      map_rows(&maps->dk, bp.dk, p.dtype, p.head_dim, p.heads_k, key_rows, p.batch, uint32_t(block_n)).ok() &&
      map_rows(&maps->dv, bp.dv, p.dtype, p.head_dim_v, p.heads_k, key_rows, p.batch, uint32_t(block_n)).ok())
    maps->dkv_by_tma = 1;
  return {};
}

Status check_bwd(const BwdProblem& bp) {
  const AttnProblem& p = bp.fwd;
  if (p.dtype != DType::F16 && p.dtype != DType::BF16) return unsupported("q", "takes float16 or bfloat16");
  if (p.out_dtype != p.dtype) return unsupported("dq", "writes gradients in the dtype of q");
  if (bp.dout_dtype != p.dtype) return unsupported("dout", "needs dout in the dtype of q");
  const int d = bwd_head_dim(p.head_dim), dv = bwd_head_dim(p.head_dim_v);
  if (d != dv)
    return unsupported("q", "takes head_dim and head_dim_v in one size class (<= 64, <= 128, <= 256), got " +
                                std::to_string(p.head_dim) + " / " + std::to_string(p.head_dim_v));
  if (p.dropout_p > 0.f) return unsupported("dropout_p", "has no dropout (the FA2 backward takes it)");
  if (p.lens.cache_seqlens != nullptr || p.k.block_table != nullptr || p.k.batch_index != nullptr)
    return unsupported("k", "takes (batch, seqlen, heads, dim) or varlen tensors");
  if (p.heads_k > 65535 || p.batch > 65535) return unsupported("q", "takes at most 65535 kv heads and 65535 sequences per call");
  // The kernels' row and key arithmetic is 32-bit, on windows narrowed to these bounds.
  if (const SeqlenBounds bounds = seqlen_bounds(p); bounds.q + bounds.k >= (int64_t(1) << 31) - 256)
    return unsupported("q", "query rows + key rows below 2^31 - 256");
  return {};
}

Status check_bwd_plan(const BwdPlan& plan, const BwdProblem& problem) {
  const AttnProblem& p = problem.fwd;
  if (plan.head_dim != bwd_head_dim(std::max(p.head_dim, p.head_dim_v)) || plan.general_score != p.score_modifiers())
    return Status::error(ErrorCode::InvalidArgument, "plan",
                         "fa3 bwd: the plan does not fit the call (head dim " + std::to_string(plan.head_dim) + " for " +
                             std::to_string(std::max(p.head_dim, p.head_dim_v)) + ", general score " +
                             (plan.general_score ? "on" : "off") + " for a call with it " + (p.score_modifiers() ? "on" : "off") + ")");
  if (plan.section_mb < 0) return Status::error(ErrorCode::InvalidArgument, "plan", "fa3 bwd: a negative section_mb");
  // At most 64: bwd_block's (n mod row_stagger) x row blocks stays below 2^31 for every length
  // check_bwd allows (row blocks < 2^25).
  if (plan.row_stagger < 1 || plan.row_stagger > 64 || (plan.row_stagger & (plan.row_stagger - 1)) != 0)
    return Status::error(ErrorCode::InvalidArgument, "plan",
                         "fa3 bwd: row_stagger must be a power of two from 1 to 64, got " + std::to_string(plan.row_stagger));
  if (problem.deterministic && plan.row_stagger != 1)
    return Status::error(ErrorCode::InvalidArgument, "plan",
                         "fa3 bwd: row_stagger must be 1 in deterministic mode (the adds of a row block wait in row block order)");
  if (!bwd_kernel_built(plan.head_dim, plan.block_m, plan.variant, plan.general_score))
    return Status::error(ErrorCode::InvalidArgument, "plan",
                         "fa3 bwd: no kernel of head dim " + std::to_string(plan.head_dim) + " with block_m " +
                             std::to_string(plan.block_m) + " and the plan's variant is built for its score path (fa3/bwd_variants.h)");
  return {};
}

BwdPlan bwd_plan(const BwdProblem& bp) {
  const AttnProblem& p = bp.fwd;
  BwdPlan plan;
  plan.head_dim = bwd_head_dim(std::max(p.head_dim, p.head_dim_v));
  plan.general_score = p.score_modifiers();
  if (const BwdKernel* kernel = bwd_first_kernel(plan.head_dim, plan.general_score)) {
    plan.block_m = kernel->block_m;
    plan.variant = kernel->variant;
  }
  // Deterministic mode: a CTA waits for the group's key block before it at every row block, so
  // CTAs of one group that start together wait in a staircase; sections start key block k of
  // many groups together instead (docs/PERF.md, 2026-12-04; 16 MB measured over 40 on
  // 2026-12-06, by 1 to 14 %).
  plan.section_mb = bp.deterministic ? kBwdDeterministicSectionMb : 0;
  // A limit on the right only (causal): a group's key blocks run from the longest to the
  // shortest, so sections of a wave keep every group's long blocks early (docs/PERF.md,
  // 2026-12-06: up to +17 % with GQA, +1 to +3 % without).
  plan.section_per_wave = !bp.deterministic && p.mask.window_right >= 0 && p.mask.window_left < 0;
  // d256 adds dQ from registers (red.global.add.v4): a group's CTAs started together add to the
  // same rows, unless their walks start at four places (docs/PERF.md, 2026-12-06: +1 to +4 % from
  // 1k to 4k keys; -1 % at 16k, where a query head's Q, dO and dQ rows no longer stay in L2 for
  // the walks that read them at other times; no gain under a mask).
  const int64_t head_bytes = p.lens.seqlen_q * (2 * (p.head_dim + p.head_dim_v) + 4 * int64_t(plan.head_dim));
  if (plan.head_dim == 256 && !bp.deterministic && !p.mask.limits_keys() && head_bytes <= kBwdStaggerHeadBytes) plan.row_stagger = 4;
  return plan;
}

Status bwd(const BwdProblem& problem, void* stream_ptr, const BwdPlan* forced_plan) {
  if (Status st = require_sm90("fa3 bwd"); !st.ok()) return st;
  if (Status st = check_bwd(problem); !st.ok()) return st;
  const AttnProblem& p = problem.fwd;
  if (p.batch == 0 || p.heads_q == 0) return {};
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const BwdPlan plan = forced_plan != nullptr ? *forced_plan : bwd_plan(problem);
  if (Status st = check_bwd_plan(plan, problem); !st.ok()) return st;

  BwdArgs args;
  args.problem = problem;
  const SeqlenBounds bounds = seqlen_bounds(p);
  args.problem.fwd.mask = clamp_windows(p.mask, bounds.q, bounds.k);
  args.score_factors = score_factors(p.score);
  args.deterministic = problem.deterministic;
  while ((1 << args.row_stagger_shift) < plan.row_stagger) ++args.row_stagger_shift;
  // The deterministic order must only make a CTA wait for CTAs started before it (bwd_block.cuh).
  args.descending = problem.deterministic && p.mask.window_right >= 0;
  const int64_t rows = p.lens.seqlen_q > 0 ? p.lens.seqlen_q : 1;
  args.rows_padded = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;

  // One allocation: [lse_log2 | delta | dq_accum | dq_semaphores]; the last two start zeroed (the
  // accumulator by the row statistics kernel).
  const size_t row_slots = size_t(p.batch) * size_t(p.heads_q) * size_t(args.rows_padded);
  const size_t lse_bytes = row_slots * sizeof(float);
  const size_t accum_bytes = row_slots * size_t(plan.head_dim) * sizeof(float);
  const size_t semaphore_bytes = problem.deterministic ? row_slots / 64 * sizeof(int) : 0;
  StreamBuffer workspace(stream);  // freed in stream order after the kernels, also when a launch fails
  if (Status st = workspace.allocate(2 * lse_bytes + accum_bytes + semaphore_bytes, "fa3 bwd: allocating the workspace"); !st.ok())
    return st;
  char* base = workspace.as<char>();
  args.lse_log2 = reinterpret_cast<float*>(base);
  args.delta = reinterpret_cast<float*>(base + lse_bytes);
  args.dq_accum = reinterpret_cast<float*>(base + 2 * lse_bytes);
  args.dq_semaphores = problem.deterministic ? reinterpret_cast<int*>(base + 2 * lse_bytes + accum_bytes) : nullptr;
  if (semaphore_bytes > 0)
    FLASHATTN_CUDA_CHECK("fa3 bwd: zeroing the semaphores", cudaMemsetAsync(args.dq_semaphores, 0, semaphore_bytes, stream));
  const Status st = p.dtype == DType::F16 ? run_kernels<__half>(args, plan, stream) : run_kernels<__nv_bfloat16>(args, plan, stream);
  if (!st.ok()) return st;
  if (Status zeroed = zero_unused_key_grads(problem, stream); !zeroed.ok()) return zeroed;
  return workspace.free("fa3 bwd: freeing the workspace");
}

}  // namespace flashattn::fa3
