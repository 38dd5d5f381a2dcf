// The kernel choice of one FA3 backward: fa3::bwd_plan picks it per call; tests and benchmarks may
// pass their own to fa3::bwd (fa3_backend.h). A plan's variant selects kernels that bwd_plan never
// picks: they have not been measured on a GPU yet (docs/PERF.md says what each is to show).
// Host and device: the kernels take the variant as a template argument (BwdConfig).
#pragma once

namespace flashattn::fa3 {

// How a step's dQ = dS K leaves the consumer warpgroups.
enum class BwdDq {
  // The head dim's own way. d64: each warpgroup multiplies its own 64 keys' dS, two bulk adds into
  // the same rows per step; d128: a column half each; d256: two slices, each added after dV and dK.
  Default,
  // d64, 64-row steps: the warpgroups take turns computing a step's whole dQ over all 128 keys
  // (the other's dS through shared memory), one bulk add per step: half the dQ traffic.
  Alternate,
  // d256: slice 0 issued before dV and dK, so that its adds run while their wgmmas do.
  Overlap,
};

// What a kernel does beyond its tile shape (template argument of BwdConfig).
struct BwdVariant {
  BwdDq dq = BwdDq::Default;
  bool l2_evict_last = false;    // EVICT_LAST L2 hint on the Q and dO loads and the dQ adds
  int consumer_registers = 232;  // setmaxnreg of the consumers: 232 (producer 32) or 240 (producer 24)
  friend constexpr bool operator==(const BwdVariant&, const BwdVariant&) = default;
};

struct BwdPlan {
  int head_dim = 0;            // the kernel's: 64, 128 or 256
  int block_m = 0;             // query rows per step: 64
  bool general_score = false;  // softcap or ALiBi (must match the call)
  BwdVariant variant{};        // bwd_plan: always the default
};

}  // namespace flashattn::fa3
