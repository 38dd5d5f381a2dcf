// The FA2 forward's entry: the plan of a call (fwd_plan.h) mapped onto its instantiation
// (fwd_launch.cuh; the kernels of kFwdKernels here, those packing query heads in
// fwd_launch_packed.cu).
#include "fa2/fwd_launch.cuh"

namespace flashattn::fa2 {

Status fwd(const AttnProblem& problem, void* stream, const FwdPlan* forced_plan) {
  const auto s = static_cast<cudaStream_t>(stream);
  // Decoding with GQA: each KV tile is read once for all the query heads that share it (a plan that
  // packs query heads into rows does so in its kernel, for any seqlen_q).
  const bool packs_queries = forced_plan != nullptr && forced_plan->pack_gqa_queries;
  AttnProblem p = !packs_queries && can_pack_gqa_rows(problem) ? pack_gqa_rows(problem) : problem;
  if ((p.k.block_table != nullptr || p.v.block_table != nullptr) &&
      (p.k.block_table != p.v.block_table || p.k.block_table_stride != p.v.block_table_stride ||
       p.k.page_size != p.v.page_size || p.k.row_offset != p.v.row_offset))
    return Status::error(ErrorCode::Unsupported, "block_table", "fa2 fwd: k and v must share one block table");  // (fwd_kernel.cuh)
  if (!clamp_windows_32(&p))
    return Status::error(ErrorCode::Unsupported, "q", "fa2 fwd: sequences of 2^30 rows or keys and more");
  if (p.dtype != DType::F16 && p.dtype != DType::BF16)
    // fp8 is FA3-only, as in FlashAttention-3 (and its kernels are not yet validated on a GPU).
    return Status::error(ErrorCode::Unsupported, "q",
                         std::string("argument 'q': the fa2 kernels take float16 or bfloat16 (float8_e4m3fn runs "
                                     "on the CPU backend; the FA3 fp8 kernels are not yet validated on a GPU), got ") +
                             dtype_name(p.dtype));
  DeviceLimits limits;
  if (Status st = device_limits(&limits, "fa2 fwd: reading the device"); !st.ok()) return st;
  const FwdPlan plan = forced_plan != nullptr ? *forced_plan : fwd_plan(problem, limits);
  if (Status st = check_fwd_plan(plan, problem, limits); !st.ok()) return st;
  if (plan.pack_gqa_queries) return launch_packed_query_plan(p, plan, limits, s);
  return fwd_launch::launch_from<kFwdKernels, false>(p, plan, limits, s);
}

}  // namespace flashattn::fa2
