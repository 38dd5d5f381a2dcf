// The kernel choice of one FA3 backward: fa3::bwd_plan picks it per call; tests and benchmarks may
// pass their own to fa3::bwd (fa3_backend.h). A plan's variant selects among the kernels built
// (bwd_variants.h); the variant is a template argument of the kernels (BwdConfig). Host and device.
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
  // d256, plain scores (bwd_plan's choice there): S = Q K^T and dP = dO V^T with the step's 64
  // rows on the wgmma M side and 80 keys per CTA, 40 per warpgroup (bwd_consumer_rows.cuh): a
  // Q/dO load and a dQ add serve 25 % more FLOPs than at 64 keys.
  bool rows_on_m = false;
  friend constexpr bool operator==(const BwdVariant&, const BwdVariant&) = default;
};

struct BwdPlan {
  int head_dim = 0;            // the kernel's: 64, 128 or 256
  int block_m = 0;             // query rows per step: 64, or 128 (d64, plain scores)
  bool general_score = false;  // softcap or ALiBi (must match the call)
  BwdVariant variant{};        // bwd_plan: the head dim's kernel (bwd_variants.h)
  // The CTAs' order: sections of (sequence, kv head) groups whose Q, dO and dQ workspace fit in
  // this many MB run one after the other, their groups' key blocks interleaved (fa3/tile_order.h),
  // so that the CTAs running together add to different groups' rows; 0: one group after another.
  int section_mb = 0;
  // Without section_mb: sections of the largest power of two of groups whose key blocks fit one
  // wave of CTAs (the SM count). For calls whose key blocks differ in length (a causal mask): in
  // one group after another, the last groups' long blocks start last and run alone at the end.
  bool section_per_wave = false;
  // dK and dV leave through shared memory with TMA stores (dense calls whose dk and dv the TMA can
  // address), else from registers.
  bool tma_store_dkv = true;
  // A power of two up to 64: the CTA of key block n walks its row blocks from (n mod row_stagger) /
  // row_stagger of the way along, wrapping round, so that the CTAs of a group running together load
  // Q and dO from and add dQ to different row blocks rather than all to the same one. 1: every CTA
  // from its first row block, as the deterministic mode needs (its adds wait on the key blocks
  // before, in row block order).
  int row_stagger = 1;
};

}  // namespace flashattn::fa3
