// fwd_kvcache on the host: rotary on the new keys and the queries, append into the cache at
// cache_seqlens, then the tiled forward over the cache (split over keys when rows are few).
#include <algorithm>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/element_io.h"
#include "cpu/thread_pool.h"
#include "cpu/workspace.h"

namespace flashattn::cpu {
namespace {

// Rotates the first rotary_dim elements of x (float) at position pos, in place.
void rotate(const RotaryParams& r, DType dtype, int64_t pos, float* x) {
  const int64_t half = r.rotary_dim / 2;
  for (int64_t k = 0; k < half; ++k) {
    const float c = load_element(r.cos, pos * r.row_stride + k, dtype);
    const float s = load_element(r.sin, pos * r.row_stride + k, dtype);
    const int64_t i1 = r.interleaved ? 2 * k : k;
    const int64_t i2 = r.interleaved ? 2 * k + 1 : k + half;
    const float x1 = x[i1], x2 = x[i2];
    x[i1] = x1 * c - x2 * s;
    x[i2] = x1 * s + x2 * c;
  }
}

}  // namespace

Status fwd_kvcache(const KvCacheProblem& kp) {
  AttnProblem p = kp.attn;
  const int64_t d = p.head_dim, dv = p.head_dim_v;
  const bool rotary = kp.rotary.rotary_dim > 0;
  const WorkerTeam team;

  // Append the new keys and values (k rotated at its absolute position) in the cache's dtype.
  if (kp.k_new.data != nullptr && kp.seqlen_new > 0) {
    team.parallel_for(p.batch * kp.seqlen_new, [&](int64_t item, int) {
      const int64_t b = item / kp.seqlen_new, t = item % kp.seqlen_new;
      const int64_t pos = kp.first_new_position(b) + t, key = kp.new_key_row(b, t);
      std::vector<float> row(size_t(std::max(d, dv)));
      for (int64_t hk = 0; hk < p.heads_k; ++hk) {
        load_row(kp.k_new.data, kp.k_new.offset(b, t, hk), p.dtype, d, row.data());
        if (rotary) rotate(kp.rotary, p.dtype, pos, row.data());
        store_row(p.k.data, p.k.offset(b, key, hk), p.dtype, d, row.data());
        load_row(kp.v_new.data, kp.v_new.offset(b, t, hk), p.dtype, dv, row.data());
        store_row(p.v.data, p.v.offset(b, key, hk), p.dtype, dv, row.data());
      }
    });
  }

  // Rotated queries go to a dense scratch copy in q's dtype (the caller's q is not modified).
  Scratch<uint8_t> rotated_q;
  if (rotary) {
    const int64_t sq = p.lens.seqlen_q;
    rotated_q.reset(size_t(p.batch * sq * p.heads_q * d) * dtype_size(p.dtype));
    RowsView q_dense;
    q_dense.data = rotated_q.data();
    q_dense.head_stride = d;
    q_dense.row_stride = p.heads_q * d;
    q_dense.batch_stride = sq * p.heads_q * d;
    team.parallel_for(p.batch * sq, [&](int64_t item, int) {
      const int64_t b = item / sq, i = item % sq;
      if (i >= p.lens.q(b)) return;  // varlen: past this sequence's rows
      const int64_t pos = kp.first_new_position(b) + (kp.rotary_q_per_row ? i : 0);
      std::vector<float> row(static_cast<size_t>(d));
      for (int64_t h = 0; h < p.heads_q; ++h) {
        load_row(p.q.data, p.q.offset(b, i, h), p.dtype, d, row.data());
        rotate(kp.rotary, p.dtype, pos, row.data());
        store_row(q_dense.data, q_dense.offset(b, i, h), p.dtype, d, row.data());
      }
    });
    p.q = q_dense;
  }
  return fwd(p);
}

}  // namespace flashattn::cpu
