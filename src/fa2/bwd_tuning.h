// Choices of the FA2 backward that measurements decide, and the knob that forces them (benchmarks
// compare them; tests run the sweep with each forced). Host code only.
#pragma once

namespace flashattn::fa2 {

// key_tiles: m16 key tiles per warp of the main kernel (bwd_kernel.cuh, BwdConfig::kKeyTiles).
// 0 = by the rule (one, until two are measured on a GPU), 1 or 2 = forced; two need more shared
// memory (P^T goes through it) and fall back to one where the GPU lacks it; softcap, ALiBi and
// dropout keep one.
// FLASHATTN_FA2_BWD_KEY_TILES=1|2 sets it, read once per process.
// dq_direct: dQ's atomic adds straight from the accumulators on sm90 (BwdArgs::dq_direct); off
// until measured. FLASHATTN_FA2_BWD_DQ_DIRECT=0|1 sets it.
struct BwdTuning {
  int key_tiles = 0;
  bool dq_direct = false;
};

// The process-wide tuning (bwd_launch.cu). Mutable for tests; not synchronised.
BwdTuning& bwd_tuning();

}  // namespace flashattn::fa2
