// Picks the FA2 forward instantiation for a call (dtype x padded head dim x dropout), plans
// split-KV, and launches the kernel (and the combine when split).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/cuda_status.h"
#include "common/env.h"
#include "common/pack_gqa.h"
#include "common/split_kv.h"
#include "fa2/device_limits.h"
#include "fa2/fa2_backend.h"
#include "fa2/fwd_kernel.cuh"
#include "fa2/fwd_plan.h"

namespace flashattn::fa2 {
namespace {

template <typename Config>
Status launch(const AttnProblem& p, cudaStream_t stream) {
  auto kernel = fwd_kernel<Config>;
  DeviceLimits limits;
  if (Status st = device_limits(&limits, "fa2 fwd: reading the device"); !st.ok()) return st;
  if (Config::kSmemBytes > limits.smem_optin)
    return Status::error(ErrorCode::Unsupported, "q",
                         "fa2 fwd: head dim " + std::to_string(p.head_dim) + " needs " +
                             std::to_string(Config::kSmemBytes) + " bytes of shared memory per block, the GPU has " +
                             std::to_string(limits.smem_optin));
  // Paged calls stage their pages in shared memory where the GPU has the bytes for it (else each
  // thread reads the table itself, fwd_kernel.cuh). The kernel's limit is the same for every call
  // on a device, so calls from several threads never race on it.
  const bool pages_fit = Config::kSmemBytes + Config::kPagesSmemBytes <= limits.smem_optin;
  const bool stage_pages = p.k.block_table != nullptr && Config::kPagesSmemBytes > 0 && pages_fit;
  const int smem_bytes = Config::kSmemBytes + (stage_pages ? Config::kPagesSmemBytes : 0);
  FLASHATTN_CUDA_CHECK("fa2 fwd: raising the shared-memory limit",
                 cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      Config::kSmemBytes + (pages_fit ? Config::kPagesSmemBytes : 0)));
  const int64_t row_blocks = (p.lens.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  if (p.heads_q > 65535 || p.batch > 65535)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: more than 65535 heads or sequences per call");
  if (row_blocks == 0 || p.batch == 0) return {};
  int splits = p.num_splits;
  if (splits == 0) {
    int resident = 1;
    FLASHATTN_CUDA_CHECK("fa2 fwd: reading the occupancy",
                         cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, Config::kThreads,
                                                                       smem_bytes));
    splits = choose_fwd_splits({row_blocks * p.heads_q * p.batch, p.lens.seqlen_k, Config::kBlockN,
                                limits.multiprocessors, resident});
  }
  if (row_blocks * splits > 0x7fffffff)
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: too many row blocks for one launch");
  const dim3 grid(unsigned(row_blocks * splits), unsigned(p.heads_q), unsigned(p.batch));

  SplitWorkspace ws;
  StreamBuffer buffer(stream);
  if (splits > 1) {
    ws.splits = splits;
    ws.total_rows = p.lens.total_q;
    const size_t out_elems = size_t(splits) * ws.total_rows * p.heads_q * p.head_dim_v;
    const size_t lse_elems = size_t(splits) * ws.total_rows * p.heads_q;
    if (Status st = buffer.allocate((out_elems + lse_elems) * sizeof(float), "fa2: allocating workspace"); !st.ok()) return st;
    ws.out_partial = buffer.as<float>();
    ws.lse_partial = ws.out_partial + out_elems;
  }
  kernel<<<grid, Config::kThreads, smem_bytes, stream>>>(p, ws, stage_pages);
  FLASHATTN_CUDA_CHECK("fa2 fwd: launch", cudaGetLastError());
  if (splits > 1) return combine(split_combine_problem(p, ws), stream);
  return {};
}

// Tile experiments: FLASHATTN_FA2_FWD_VARIANT=1, 2, 3 or 4 (d256 only) picks an alternative tiling of the plain
// (no dropout, softcap or ALiBi) kernels, 0 the base tiles (bench and tests; unset is the default).
int tile_variant() {
  static const int variant = [] {
    const std::string v = env_string("FLASHATTN_FA2_FWD_VARIANT");
    return v.empty() ? -1 : std::atoi(v.c_str());
  }();
  return variant;
}

// (head dim, kBlockM, kBlockN, warps): each warp holds kBlockM / warps rows. Head dims 32, 64, .., 256
// have kernels of their own (H200: the GPU suite, 2026-11-29); others run padded to the next. The dropout variants take smaller tiles where the
// Philox state would otherwise spill. The plain d64 kernel keeps Q's fragments in registers (238
// registers, two CTAs per SM either way; at d96 and up, and with softcap/ALiBi or dropout, they
// would spill; at d32 they would cost the third CTA).
template <typename Element, bool kDropout, bool kGeneral>
Status launch_head_dim(int64_t dim, const AttnProblem& p, cudaStream_t stream) {
  constexpr bool kPlain = !kDropout && !kGeneral;
  if (dim <= 32) return launch<FwdConfig<Element, 32, 128, kDropout ? 32 : 64, 4, kDropout, kGeneral>>(p, stream);
  if (dim <= 64) return launch<FwdConfig<Element, 64, 128, kDropout ? 32 : 64, 4, kDropout, kGeneral, kPlain>>(p, stream);
  if (dim <= 96) return launch<FwdConfig<Element, 96, kDropout ? 64 : 128, 32, 4, kDropout, kGeneral>>(p, stream);
  if (dim <= 128) return launch<FwdConfig<Element, 128, kDropout ? 64 : 128, 32, 4, kDropout, kGeneral>>(p, stream);
  if (dim <= 160) return launch<FwdConfig<Element, 160, 64, 32, 4, kDropout, kGeneral>>(p, stream);
  if (dim <= 192) return launch<FwdConfig<Element, 192, 64, 32, 4, kDropout, kGeneral>>(p, stream);
  if (dim <= 224) return launch<FwdConfig<Element, 224, 64, 32, 4, kDropout, kGeneral>>(p, stream);
  return launch<FwdConfig<Element, 256, 64, 32, 4, kDropout, kGeneral>>(p, stream);
}

template <typename Element, bool kDropout, bool kGeneral>
Status dispatch_head_dim(const AttnProblem& p, cudaStream_t stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  if constexpr (!kDropout && !kGeneral) {
    const int variant = tile_variant();
    // Decoding (a few query rows per head, e.g. pack-GQA's rows of one KV head): 64-row tiles, in
    // which the warps without rows skip the math (fwd_kernel.cuh) and 64-key tiles keep the loads
    // deep. Dense grids use the tiles below.
    if (variant < 0 && p.lens.seqlen_q <= 16) {
      if (dim <= 64) return launch<FwdConfig<Element, 64, 64, 64, 4, false, false>>(p, stream);
      if (dim <= 128) return launch<FwdConfig<Element, 128, 64, 64, 4, false, false>>(p, stream);
      // d256 with two 64-key stages needs 165 KB: more than sm80's and sm86's opt-in, where the
      // dense tiles below take the call.
      using DecodeD256 = FwdConfig<Element, 256, 64, 64, 4, false, false>;
      DeviceLimits limits;
      if (Status st = device_limits(&limits, "fa2 fwd: reading the device"); !st.ok()) return st;
      if (DecodeD256::kSmemBytes <= limits.smem_optin) return launch<DecodeD256>(p, stream);
    }
    if (variant == 1) {
      if (dim <= 64) return launch<FwdConfig<Element, 64, 128, 64, 8, false, false>>(p, stream);
      if (dim <= 128) return launch<FwdConfig<Element, 128, 128, 64, 8, false, false>>(p, stream);
      return launch<FwdConfig<Element, 256, 128, 32, 8, false, false>>(p, stream);
    }
    if (variant == 2) {
      if (dim <= 64) return launch<FwdConfig<Element, 64, 128, 64, 8, false, false>>(p, stream);
      if (dim <= 128) return launch<FwdConfig<Element, 128, 64, 64, 4, false, false>>(p, stream);
      return launch<FwdConfig<Element, 256, 64, 64, 4, false, false>>(p, stream);
    }
    // d256 as torch's FA2 runs it on an H200: 64x64, 4 warps, one K/V stage (99 KB: two CTAs per
    // SM, which cover each other's barriers and softmax; static SASS, docs/PERF.md). Measured (H200
    // 2026-11-29): 2-6 % slower than the default 128x64 from 1k keys (causal +2-7 % below 2k only).
    if (variant == 4 && dim > 224) return launch<FwdConfig<Element, 256, 64, 64, 4, false, false, false, 1>>(p, stream);
    // d256 at 128x64 with 8 warps: half the key tiles of 64x32 per row block, and twice the
    // keys per barrier; 198 KB of shared memory, one CTA per SM. The default where the GPU has the
    // shared memory (sm90: 227 KB; H200 2026-11-29: +13-18 % over 64x32 at 2k/8k, causal and
    // not); sm80/sm86/sm89 keep 64x32.
    using WideD256 = FwdConfig<Element, 256, 128, 64, 8, false, false>;
    if (dim > 224 && variant != 0) {
      DeviceLimits limits;
      if (Status st = device_limits(&limits, "fa2 fwd: reading the device"); !st.ok()) return st;
      if (variant == 3 || (variant < 0 && WideD256::kSmemBytes <= limits.smem_optin)) return launch<WideD256>(p, stream);
    }
  }
  return launch_head_dim<Element, kDropout, kGeneral>(dim, p, stream);
}

// Instantiations: plain and general without dropout (the tile variants plain only), general only
// with dropout (its Philox rounds dominate the score math), which keeps the compile time down.
template <typename Element>
Status dispatch_dropout(const AttnProblem& p, cudaStream_t stream) {
  if (p.dropout_p > 0.f) return dispatch_head_dim<Element, true, true>(p, stream);
  return !p.plain_forward_scores() ? dispatch_head_dim<Element, false, true>(p, stream)
                          : dispatch_head_dim<Element, false, false>(p, stream);
}

}  // namespace

Status fwd(const AttnProblem& problem, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // Decoding with GQA: each KV tile is read once for all the query heads that share it.
  AttnProblem p = can_pack_gqa_rows(problem) ? pack_gqa_rows(problem) : problem;
  if ((p.k.block_table != nullptr || p.v.block_table != nullptr) &&
      (p.k.block_table != p.v.block_table || p.k.block_table_stride != p.v.block_table_stride ||
       p.k.page_size != p.v.page_size || p.k.row_offset != p.v.row_offset))
    return Status::error(ErrorCode::Unsupported, "block_table", "fa2 fwd: k and v must share one block table");  // (fwd_kernel.cuh)
  if (!clamp_windows_32(&p))
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: sequences of 2^30 rows or keys and more");
  switch (p.dtype) {
    case DType::F16: return dispatch_dropout<__half>(p, s);
    case DType::BF16: return dispatch_dropout<__nv_bfloat16>(p, s);
    default:
      // fp8 is FA3-only, as in FlashAttention-3 (and its kernels are not yet validated on a GPU).
      return Status::error(ErrorCode::Unsupported, "q",
                           std::string("argument 'q': the fa2 kernels take float16 or bfloat16 (float8_e4m3fn runs "
                                       "on the CPU backend; the FA3 fp8 kernels are not yet validated on a GPU), got ") +
                               dtype_name(p.dtype));
  }
}

}  // namespace flashattn::fa2
