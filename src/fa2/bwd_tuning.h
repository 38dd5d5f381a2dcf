// Choices of the FA2 backward that measurements decide, and the knob that forces them (benchmarks
// compare them; tests run the sweep with each forced). Host code only.
#pragma once

namespace flashattn::fa2 {

// key_tiles: m16 key tiles per warp of the main kernel (bwd_kernel.cuh, BwdConfig::kKeyTiles).
// 0 = by the rule: two wherever the GPU has the shared memory (P^T goes through it; H200,
// 2026-11-29: +3-14 % over one at every head dim, docs/PERF.md), 1 = forced one. Softcap, ALiBi
// and dropout always use one (the general score path spills with two).
// FLASHATTN_FA2_BWD_KEY_TILES=1|2 sets it, read once per process.
// block_m: query rows per step of the d64 two-key-tile kernel: 0 = by the rule (128 where the
// shared memory allows), 64 = forced. FLASHATTN_FA2_BWD_BLOCK_M=64|128 sets it.
// rotate_rows: in the atomic mode each CTA starts at its own row block (blockIdx.x modulo its row
// blocks), so that the CTAs of a head spread their dQ adds over different rows. On by default
// (H200, 2026-11-29: d256 +1-4 %, d64/d128 within +-1 %). FLASHATTN_FA2_BWD_ROTATE=0|1 sets it.
// dq_bulk: sm90, atomic mode: each staged 16 x 16 dQ tile is added by one bulk reduction (TMA
// unit) instead of vector atomics from every lane. -1 = by the rule: bulk at d256 (H200,
// 2026-11-29: +2-4 % there; d64/d128 within +-1 %, docs/PERF.md), 0 = forced atomics, 1 = forced
// bulk. FLASHATTN_FA2_BWD_DQ_BULK=0|1 sets it.
// (dQ before dK/dV, to overlap its adds with those GEMMs, measured 3-7 % slower: not kept.)
struct BwdTuning {
  int key_tiles = 0;
  int block_m = 0;
  bool rotate_rows = true;
  int dq_bulk = -1;
};

// The process-wide tuning (bwd_launch.cu). Mutable for tests; not synchronised.
BwdTuning& bwd_tuning();

}  // namespace flashattn::fa2
