#include "api/fa3_bwd_forced.h"

#include <string>

#include "api/rules.h"
#include "api/validate.h"
#include "common/workspace_scope.h"
#include "fa3/bwd_variant_names.h"
#if defined(FLASHATTN_WITH_CUDA)
#include "fa3/fa3_backend.h"
#endif

namespace flashattn::api {

Status bwd_fa3_forced(const BwdParams& params, [[maybe_unused]] const Fa3BwdOverride& change) {
  BwdProblem problem;
  FA_CHECK(make_bwd_problem(params, &problem));
#if defined(FLASHATTN_WITH_CUDA)
  if (params.q.device != DeviceType::Cuda) return unsupported("backend", "the FA3 backward needs CUDA tensors");
  FA_CHECK(fa3::check_bwd(problem));
  if (params.dq.numel() == 0 && params.dk.numel() == 0 && params.dv.numel() == 0) return {};
  fa3::BwdPlan plan = fa3::bwd_plan(problem);
  if (const auto& kernel = change.kernel) {
    if (!fa3::bwd_kernel_built(plan.head_dim, kernel->block_m, kernel->variant, plan.general_score))
      return unsupported("plan", "fa3 bwd: the kernel variant " + fa3::bwd_kernel_name(*kernel) + " of " +
                                     std::to_string(kernel->block_m) + "-row steps is not built at head dim " +
                                     std::to_string(plan.head_dim) + (plan.general_score ? " with softcap or ALiBi" : ""));
    plan.block_m = kernel->block_m;
    plan.variant = kernel->variant;
  }
  if (change.section_mb) {
    plan.section_mb = *change.section_mb;
    plan.section_per_wave = false;
  }
  if (change.section_per_wave) plan.section_per_wave = *change.section_per_wave;
  if (change.tma_store_dkv) plan.tma_store_dkv = *change.tma_store_dkv;
  if (change.row_stagger) plan.row_stagger = *change.row_stagger;
  const WorkspaceScope workspace(params.workspace);
  return fa3::bwd(problem, params.stream, &plan);
#else
  return unsupported("backend", "the FA3 backward is not in this build (configured without CUDA)");
#endif
}

}  // namespace flashattn::api
