// The fp8 forward kernels that are built (one Fp8FwdConfig each, times the two output dtypes):
// the plan function (fp8_fwd_launch.cu) chooses among them, and each fp8_fwd_hdim*.cu instantiates
// those of its head dim from this list. Host and device.
#pragma once

namespace flashattn::fa3 {

struct Fp8Tile {
  int head_dim, block_m, block_n;
  bool general_score, pingpong;
  bool no_key_limits = false;  // only calls without causal or window limits (Fp8FwdConfig::kNoKeyLimits)
};

// FlashAttention-3's fp8 tiles (d64 192 x 160, also in a kernel for calls without causal or window
// limits; d128 128 x 224; d256 128 x 128), smaller tiles for short calls, and the general-score
// (softcap, ALiBi) tiles. Ping-pong only on the short d64 tiles: FA3 takes turns at d128 and d256,
// 0-6 % slower here (docs/PERF.md).
inline constexpr Fp8Tile kFp8Tiles[] = {
    {64, 192, 160, false, false, true}, {64, 192, 160, false, false}, {64, 192, 128, false, true},  {64, 128, 128, false, true},
    {64, 128, 128, true, false},
    {128, 128, 224, false, false}, {128, 128, 128, false, false}, {128, 128, 128, true, false},
    {256, 128, 128, false, false}, {256, 128, 64, true, false},
};
// O (16-bit, block_m x d) fits the V stages (fp8, block_n x d each) where it is staged for TMA
// stores.
constexpr bool fp8_o_fits_v_stages(int block_m, int block_n, int stages = 2) {
  constexpr int kOElementBytes = 2, kVElementBytes = 1;
  return block_m * kOElementBytes <= stages * block_n * kVElementBytes;
}

inline constexpr int kFp8TileCount = int(sizeof(kFp8Tiles) / sizeof(kFp8Tiles[0]));

}  // namespace flashattn::fa3
