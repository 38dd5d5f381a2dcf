// Host-side pieces every FA3 launch shares: the head dim a call runs at (head_dim.h), bounds of
// its sequence lengths, TMA maps over (batch, seqlen, heads, dim) tensors, and the device.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "common/problem.h"
#include "common/rows.h"
#include "fa3/head_dim.h"
#include "flashattn/flashattn.h"

namespace flashattn::fa3 {

// Upper bounds of every sequence's lengths that hold whatever max_seqlen a varlen caller passed (it
// is not checked against cu_seqlens on the device): a varlen sequence lies within q's and k's rows.
struct SeqlenBounds {
  int64_t q, k;
};
inline SeqlenBounds seqlen_bounds(const AttnProblem& p) {
  const bool varlen = p.lens.cu_seqlens_q != nullptr;
  return {varlen ? p.lens.total_q : p.lens.seqlen_q, varlen ? p.lens.total_k : p.lens.seqlen_k};
}

// (head_dim, heads, seqlen, batch) with a (swizzle_bytes of elements) x 1 x box_rows x 1 box in that
// swizzle (128 bytes: 64 elements of fp16/bf16, 128 of fp8; 64 bytes: fp8 only). Varlen
// (cu_seqlens set): all `seqlen` rows as one sequence (batch extent 1); kernels add cu_seqlens[b]
// to the row.
Status map_rows(CUtensorMap* map, const RowsView& view, DType dtype, int64_t dim, int64_t heads, int64_t seqlen, int64_t batch,
                uint32_t box_rows, int swizzle_bytes = 128);

// Multiprocessors of the current device.
int sm_count();

// Ok on an sm90 device; else Unsupported (argument "q") naming `what`.
Status require_sm90(const char* what);

}  // namespace flashattn::fa3
