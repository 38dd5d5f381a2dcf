// The entry points: validate, choose the backend, run it. Every failure comes back as a Status;
// an exception escaping a backend becomes ErrorCode::Internal instead of crossing the API.
#include <exception>
#include <string>

#include "api/rules.h"
#include "api/validate.h"
#include "common/workspace_scope.h"
#include "cpu/cpu_backend.h"
#if defined(FLASHATTN_WITH_CUDA)
#include "fa2/fa2_backend.h"
#include "fa3/fa3_backend.h"
#endif

namespace flashattn {

namespace {

using api::invalid_argument;
using api::unsupported;

// Where a call runs, once the requested Backend and the tensors' device are reconciled.
enum class Target { Cpu, Fa2, Fa3 };

const char* target_name(Target target) {
  switch (target) {
    case Target::Cpu: return "cpu";
    case Target::Fa2: return "fa2";
    case Target::Fa3: return "fa3";
  }
  return "unknown";
}

// Picks the backend for tensors living where `placement` lives (all tensors share its device:
// validation checked that). `placement_name` names that tensor in errors.
Status choose_target(Backend requested, const TensorView& placement, [[maybe_unused]] const char* placement_name,
                     Target* target) {
  if (placement.device == DeviceType::Cpu) {
    if (requested == Backend::Auto || requested == Backend::Cpu) {
      *target = Target::Cpu;
      return {};
    }
    return invalid_argument("backend",
                            std::string("the ") + backend_name(requested) +
                                " backend runs CUDA kernels and needs CUDA tensors",
                            "host tensors");
  }
  if (requested == Backend::Cpu)
    return invalid_argument("backend", "the CPU backend needs host tensors",
                            "tensors on " + api::device_string(placement));
#if defined(FLASHATTN_WITH_CUDA)
  const DeviceInfo info = device_info(placement.device_index);
  if (info.device < 0)
    return invalid_argument(placement_name,
                            "must be on a visible CUDA device (" + std::to_string(info.device_count) + " visible)",
                            api::device_string(placement));
  const std::string arch = "sm" + std::to_string(info.sm_major) + std::to_string(info.sm_minor);
  const std::string where = api::device_string(placement) + " (" + info.name + ") is " + arch;
  if (requested == Backend::Fa3 && info.sm_major != 9)
    return unsupported("backend", "fa3 needs an sm90 GPU (Hopper); " + where);
  if (info.sm_major < 8) return unsupported("backend", "the CUDA backends need an sm80 or newer GPU; " + where);
  // Auto takes FA2 here; a forward the FA3 kernel covers moves to FA3 on sm90 (auto_forward_target).
  *target = requested == Backend::Fa3 ? Target::Fa3 : Target::Fa2;
  return {};
#else
  return unsupported("backend",
                     "the FA2/FA3 CUDA kernels are not in this build (it was configured without CUDA), "
                     "so tensors on " + api::device_string(placement) + " cannot be used");
#endif
}

// A GPU backend whose kernels are not compiled in yet. When they land, the run_* functions
// below call them instead: one line per entry point.
Status kernels_not_built(Target target) {
  return unsupported("backend", std::string("the FA2/FA3 CUDA kernels are not in this build yet (") +
                                    target_name(target) + " was chosen for these CUDA tensors)");
}

// fp8 inputs on a GPU backend: FA2 has no fp8 kernels (as in FlashAttention-2); FA3's fp8 forward
// (sm90) takes them once validated on a GPU (fa3::kFp8FwdEnabled), without a KV cache: until then
// no CUDA kernel may see them. fa3::check names what else the fp8 forward does not cover.
Status check_fp8_target(Target target, DType dtype, bool kvcache) {
  if (target == Target::Cpu || dtype != DType::F8E4M3) return {};
#if defined(FLASHATTN_WITH_CUDA)
  if (fa3::kFp8FwdEnabled) {
    if (kvcache)
      return unsupported("q", std::string("float8_e4m3fn with a KV cache runs on the CPU backend only: the GPU's fp8 forward "
                                          "has no KV-cache kernel (") +
                                  target_name(target) + " was chosen for these CUDA tensors)");
    if (target == Target::Fa3) return {};
    return unsupported("q", std::string("float8_e4m3fn inputs on a GPU run on the FA3 fp8 forward of an sm90 GPU (H100, "
                                        "H200); FA2 has no fp8 kernels (") +
                                target_name(target) + " was chosen for these CUDA tensors)");
  }
#endif
  (void)kvcache;
  return unsupported("q", std::string("float8_e4m3fn inputs run on the CPU backend only: the FA3 fp8 kernels are "
                                      "built but not yet validated on a GPU (") +
                              target_name(target) + " was chosen for these CUDA tensors)");
}

// Auto on an sm90 GPU: the FA3 forward (faster than FA2 everywhere it was measured, docs/PERF.md)
// for every problem it covers; FA2 for the rest.
Target auto_forward_target(Target chosen, [[maybe_unused]] const TensorView& placement,
                           [[maybe_unused]] const AttnProblem& problem) {
#if defined(FLASHATTN_WITH_CUDA)
  if (chosen == Target::Fa2 && device_info(placement.device_index).sm_major == 9) {
    // fp8 runs on FA3 alone: a call its fp8 forward does not cover gets fa3::check's reason.
    if ((fa3::kFp8FwdEnabled && problem.dtype == DType::F8E4M3) || fa3::check(problem).ok()) return Target::Fa3;
  }
#endif
  return chosen;
}

// Auto on an sm90 GPU: the FA3 backward (H200: 1.3-2x the FA2 backward's TFLOP/s at d64/d128,
// docs/PERF.md) for every problem it covers; FA2 for the rest (dropout; q/k and v head dims in
// different size classes).
Target auto_backward_target(Target chosen, [[maybe_unused]] const TensorView& placement,
                            [[maybe_unused]] const BwdProblem& problem) {
#if defined(FLASHATTN_WITH_CUDA)
  if (chosen == Target::Fa2 && device_info(placement.device_index).sm_major == 9 && fa3::check_bwd(problem).ok())
    return Target::Fa3;
#endif
  return chosen;
}

Status run_fwd(Target target, const AttnProblem& problem, [[maybe_unused]] void* stream) {
  switch (target) {
    case Target::Cpu: return cpu::fwd(problem);
#if defined(FLASHATTN_WITH_CUDA)
    case Target::Fa2: return fa2::fwd(problem, stream);
    case Target::Fa3: return fa3::fwd(problem, stream);
#else
    case Target::Fa2:
    case Target::Fa3: break;
#endif
  }
  return kernels_not_built(target);
}


Status run_bwd(Target target, const BwdProblem& problem, [[maybe_unused]] void* stream) {
  switch (target) {
    case Target::Cpu: return cpu::bwd(problem);
#if defined(FLASHATTN_WITH_CUDA)
    case Target::Fa2: return fa2::bwd(problem, stream);
    case Target::Fa3: return fa3::bwd(problem, stream);
#else
    case Target::Fa2:
    case Target::Fa3: break;
#endif
  }
  return kernels_not_built(target);
}

Status run_fwd_kvcache(Target target, const KvCacheProblem& problem, [[maybe_unused]] void* stream) {
  switch (target) {
    case Target::Cpu: return cpu::fwd_kvcache(problem);
#if defined(FLASHATTN_WITH_CUDA)
    case Target::Fa2: return fa2::fwd_kvcache(problem, stream);
    case Target::Fa3:
      return unsupported("backend", "fa3 has no fwd_kvcache kernel; backend auto or fa2 runs it on this GPU");
#else
    case Target::Fa2:
    case Target::Fa3: break;
#endif
  }
  return kernels_not_built(target);
}

Status run_combine(Target target, const CombineProblem& problem, [[maybe_unused]] void* stream) {
  switch (target) {
    case Target::Cpu: return cpu::combine(problem);
#if defined(FLASHATTN_WITH_CUDA)
    // One combine kernel serves both GPU paths (it is plain CUDA, no arch-specific instructions).
    case Target::Fa2:
    case Target::Fa3: return fa2::combine(problem, stream);
#else
    case Target::Fa2:
    case Target::Fa3: break;
#endif
  }
  return kernels_not_built(target);
}

// Runs an entry point's body; exceptions (bad_alloc in a backend, a bug) become Internal.
template <typename Body>
Status guarded(const char* entry, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Status::error(ErrorCode::Internal, "", std::string(entry) + ": internal error: " + e.what());
  } catch (...) {
    return Status::error(ErrorCode::Internal, "", std::string(entry) + ": internal error: unknown exception");
  }
}

}  // namespace

Status fwd(const FwdParams& params) {
  return guarded("fwd", [&]() -> Status {
    AttnProblem problem;
    FA_CHECK(api::make_fwd_problem(params, &problem));
    Target target{};
    FA_CHECK(choose_target(params.backend, params.q, "q", &target));
    if (params.backend == Backend::Auto) target = auto_forward_target(target, params.q, problem);
    FA_CHECK(check_fp8_target(target, problem.dtype, false));
    if (params.out.numel() == 0) return {};  // no query rows: nothing to write
    const WorkspaceScope workspace(params.workspace);
    return run_fwd(target, problem, params.stream);
  });
}

Status bwd(const BwdParams& params) {
  return guarded("bwd", [&]() -> Status {
    BwdProblem problem;
    FA_CHECK(api::make_bwd_problem(params, &problem));
    Target target{};
    FA_CHECK(choose_target(params.backend, params.q, "q", &target));
    if (params.backend == Backend::Auto) target = auto_backward_target(target, params.q, problem);
    // Keys without queries still get (zero) gradients, so only a call without any is empty.
    if (params.dq.numel() == 0 && params.dk.numel() == 0 && params.dv.numel() == 0) return {};
    const WorkspaceScope workspace(params.workspace);
    return run_bwd(target, problem, params.stream);
  });
}

Status fwd_kvcache(const KvCacheParams& params) {
  return guarded("fwd_kvcache", [&]() -> Status {
    KvCacheProblem problem;
    FA_CHECK(api::make_kvcache_problem(params, &problem));
    Target target{};
    FA_CHECK(choose_target(params.backend, params.q, "q", &target));
    FA_CHECK(check_fp8_target(target, problem.attn.dtype, true));
    // Appending keys is work even without query rows.
    if (params.out.numel() == 0 && params.k_new.numel() == 0) return {};
    const WorkspaceScope workspace(params.workspace);
    return run_fwd_kvcache(target, problem, params.stream);
  });
}

Status combine(const CombineParams& params) {
  return guarded("combine", [&]() -> Status {
    CombineProblem problem;
    FA_CHECK(api::make_combine_problem(params, &problem));
    Target target{};
    FA_CHECK(choose_target(params.backend, params.out_partial, "out_partial", &target));
    if (params.out.numel() == 0) return {};
    const WorkspaceScope workspace(params.workspace);
    return run_combine(target, problem, params.stream);
  });
}

Status dropout_mask(const DropoutMaskParams& params) {
  return guarded("dropout_mask", [&]() -> Status {
    FA_CHECK(api::validate_dropout_mask(params));
    const TensorView& mask = params.mask;
    if (mask.numel() == 0) return {};
    cpu::dropout_mask(params, mask.shape[0], mask.shape[1], mask.shape[2], mask.shape[3],
                      static_cast<uint8_t*>(mask.data));
    return {};
  });
}

}  // namespace flashattn
