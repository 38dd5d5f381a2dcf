// GPU tests that force kernel plans through the backend entries (fa2_backend.h, fa3_backend.h):
// the device params become the call the API makes of them, a test's choice function gives the
// plan (from the call and, for FA2, the device's limits), and the entry runs with it. A choice
// that has no plan for a call (nullopt) marks a call the variant cannot take: the tests ask first
// (has_*_plan on AttentionRun::problem()) and skip those.
#pragma once

#include <functional>
#include <optional>

#include "api/validate.h"
#include "device_mirror.h"
#include "fa2/fa2_backend.h"
#include "fa3/fa3_backend.h"
#include "flashattn/flashattn.h"
#include "gpu_test_util.h"

namespace flashattn::gpu_test {

inline fa2::DeviceLimits fa2_limits() {
  fa2::DeviceLimits limits;
  const Status st = fa2::device_limits(&limits, "test: reading the device");
  if (!st.ok()) throw CudaCallError(st.message());
  return limits;
}

inline Status no_plan() {
  return Status::error(ErrorCode::Internal, "plan", "test: the choice has no plan for this call (the test should skip it)");
}

using Fa2FwdChoice = std::function<std::optional<fa2::FwdPlan>(const AttnProblem& call, const fa2::DeviceLimits&)>;
using Fa2BwdChoice = std::function<std::optional<fa2::BwdPlan>(const BwdProblem& call, const fa2::DeviceLimits&)>;
using Fa3FwdChoice = std::function<std::optional<fa3::FwdPlan>(const AttnProblem& call)>;

// The choice's plan where check_*_plan accepts it on this device, else none.
inline Fa2FwdChoice checked(Fa2FwdChoice choose) {
  return [choose](const AttnProblem& call, const fa2::DeviceLimits& limits) -> std::optional<fa2::FwdPlan> {
    const std::optional<fa2::FwdPlan> plan = choose(call, limits);
    if (!plan || !fa2::check_fwd_plan(*plan, call, limits).ok()) return std::nullopt;
    return plan;
  };
}
inline Fa2BwdChoice checked(Fa2BwdChoice choose) {
  return [choose](const BwdProblem& call, const fa2::DeviceLimits& limits) -> std::optional<fa2::BwdPlan> {
    const std::optional<fa2::BwdPlan> plan = choose(call, limits);
    if (!plan || !fa2::check_bwd_plan(*plan, call, limits).ok()) return std::nullopt;
    return plan;
  };
}
inline Fa3FwdChoice checked(Fa3FwdChoice choose) {
  return [choose](const AttnProblem& call) -> std::optional<fa3::FwdPlan> {
    const std::optional<fa3::FwdPlan> plan = choose(call);
    if (!plan || !fa3::check_fwd_plan(*plan, call).ok()) return std::nullopt;
    return plan;
  };
}

// fa2::fwd with the choice's plan, on device params.
inline DeviceFwd fa2_fwd_with(Fa2FwdChoice choose) {
  return [choose](const FwdParams& d) -> Status {
    AttnProblem call;
    if (Status st = api::make_fwd_problem(d, &call); !st.ok()) return st;
    if (d.out.numel() == 0) return {};
    const std::optional<fa2::FwdPlan> plan = choose(call, fa2_limits());
    return plan ? fa2::fwd(call, d.stream, &*plan) : no_plan();
  };
}

// fa2::fwd_kvcache with the choice's plan for the forward over the cache.
inline DeviceKvCache fa2_kvcache_with(Fa2FwdChoice choose) {
  return [choose](const KvCacheParams& d) -> Status {
    KvCacheProblem call;
    if (Status st = api::make_kvcache_problem(d, &call); !st.ok()) return st;
    if (d.out.numel() == 0 && d.k_new.numel() == 0) return {};
    const std::optional<fa2::FwdPlan> plan = choose(call.attn, fa2_limits());
    return plan ? fa2::fwd_kvcache(call, d.stream, &*plan) : no_plan();
  };
}

// fa2::bwd with the choice's plan.
inline DeviceBwd fa2_bwd_with(Fa2BwdChoice choose) {
  return [choose](const BwdParams& d) -> Status {
    BwdProblem call;
    if (Status st = api::make_bwd_problem(d, &call); !st.ok()) return st;
    if (d.dq.numel() == 0 && d.dk.numel() == 0 && d.dv.numel() == 0) return {};
    const std::optional<fa2::BwdPlan> plan = choose(call, fa2_limits());
    return plan ? fa2::bwd(call, d.stream, &*plan) : no_plan();
  };
}

// fa3::fwd with the choice's plan.
inline DeviceFwd fa3_fwd_with(Fa3FwdChoice choose) {
  return [choose](const FwdParams& d) -> Status {
    AttnProblem call;
    if (Status st = api::make_fwd_problem(d, &call); !st.ok()) return st;
    if (d.out.numel() == 0) return {};
    const std::optional<fa3::FwdPlan> plan = choose(call);
    return plan ? fa3::fwd(call, d.stream, &*plan) : no_plan();
  };
}

// Runners on host params (AttentionRun::check_fwd / check_bwd, the KV cache cases): mirrored onto
// the device, then `call`.
inline DeviceFwd on_device(DeviceFwd call) {
  return [call](const FwdParams& host) { return fwd_on_device_via(host, call); };
}
inline DeviceBwd on_device(DeviceBwd call) {
  return [call](const BwdParams& host) { return bwd_on_device_via(host, call); };
}
inline DeviceKvCache on_device(DeviceKvCache call) {
  return [call](const KvCacheParams& host) { return kvcache_on_device_via(host, call); };
}

}  // namespace flashattn::gpu_test
