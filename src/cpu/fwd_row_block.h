// The forward's inner loop, shared by fwd (whole key range or one split) and fwd_kvcache.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "cpu/tile_ops.h"
#include "cpu/workspace.h"

namespace flashattn::cpu {

// Per-worker tile buffers, allocated once per call.
struct FwdScratch {
  FwdScratch(int64_t head_dim, int64_t head_dim_v);
  Scratch<float> q, kt, v, s, o, row_max, row_sum, lse, row_buffer;
};

// Attention of rows [row0, row0 + rows) of (b, h) over keys [key_begin, key_end) (clipped to the
// mask). Leaves the normalised output in ws.o (rows x head_dim_v) and the LSE in ws.lse; rows that
// see no key get 0 and -inf.
void attend_row_block(const AttnProblem& problem, int64_t b, int64_t h, int64_t row0, int rows,
                      int64_t key_begin, int64_t key_end, FwdScratch& ws);

}  // namespace flashattn::cpu
