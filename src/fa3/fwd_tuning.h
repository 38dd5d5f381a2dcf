// Tile choices of the FA3 forward that depend on the call's size, and the knobs that force them
// (benchmarks compare variants; tests run the sweep with each forced). Host code only.
#pragma once

#include <cstdint>

namespace flashattn::fa3 {

// 0 (ping-pong: -1) = chosen per call by the rules in fwd_hdim64.cu, fwd_hdim128.cu and
// fwd_launch.cuh. The environment variables are read once per process: FLASHATTN_FA3_PINGPONG=0|1
// turns ping-pong off or on, FLASHATTN_FA3_D64_CONSUMERS=2|3, FLASHATTN_FA3_D64_BLOCKN=128|192 and
// FLASHATTN_FA3_D128_BLOCKN=128|144|176 force those choices, FLASHATTN_FA3_DYNAMIC=1|0 turns the dynamic schedule on or off,
// FLASHATTN_FA3_SECTION_MB=N sets its section size.
struct FwdTuning {
  // Ping-pong of the consumer warpgroups: -1 = by the rule in fwd_launch.cuh (off for unmasked
  // d256 calls), 0 = off, 1 = on.
  int pingpong = -1;
  int d64_consumers = 0;  // consumer warpgroups of plain d64 calls: 2 (128 x 128) or 3 (192 x 128)
  int d128_block_n = 0;   // key tile of unmasked plain d128 calls: 128, 144 or 176
  // Key tile of unmasked plain d64 calls on three consumer warpgroups: 128, or 192 with P through
  // shared memory (FwdConfig::kPInSmem); 0 = by the rule in fwd_hdim64.cu.
  int d64_block_n = 0;
  // Causal, windowed and varlen calls on persistent CTAs that take their tiles from a counter
  // (fwd_scheduler.cuh) instead of a CTA per tile (H200, same run: causal +1-24 % at d64, +1-15 %
  // at d128, +0-6 % at d256, most at short sequences).
  bool dynamic_schedule = true;
  // The dynamic order's sections (fwd_scheduler.cuh): megabytes of K and V per section; 0 = one
  // head per section (H200, same run, against 0: causal d256 +7-11 % at 1k-8k, d128 +1-7 %, d64
  // +3-5 %; 16 and 32 alike, 64 worse at d128/d256 short lengths).
  int section_mb = 16;
  // The epilogue's O through shared memory and TMA stores (dense calls whose out the TMA can
  // address; FwdMaps::o_by_tma): -1 = by the rule (fwd_launch.cu: value head dims from 128),
  // 0 = stores from registers, 1 = on.
  int tma_store_o = -1;
};

// The process-wide tuning (fwd_launch.cu). Mutable for tests; not synchronised: set it before
// launching from several threads.
FwdTuning& fwd_tuning();

// Whether a tile of block_m x block_n pads a seqlen_q x seqlen_k problem by at most `slack` (a
// fraction) more than the base_m x base_n tile does: wider tiles are faster per key, but their
// padding of the last row block and key tile wastes work on short sequences.
inline bool pads_at_most(int64_t seqlen_q, int64_t seqlen_k, int block_m, int block_n, int base_m, int base_n, double slack) {
  auto padded = [](int64_t x, int block) { return double((x + block - 1) / block * block); };
  return padded(seqlen_q, block_m) * padded(seqlen_k, block_n) <= (1.0 + slack) * padded(seqlen_q, base_m) * padded(seqlen_k, base_n);
}

}  // namespace flashattn::fa3
