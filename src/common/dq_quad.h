// What the shared dQ conversion (cuda/bwd_convert_dq.cuh) asks of an fp32 dQ accumulator's
// layout: float4 f of a 64-row slab holds (row, col), (row, col + 1), (row + 8, col) and
// (row + 8, col + 1). Each path's layout header names the quad of f (fa2/dq_layout.h,
// fa3/bwd_dq_layout.h). Host and device.
#pragma once

namespace flashattn {

struct DqQuad {
  int row, col;
};

}  // namespace flashattn
