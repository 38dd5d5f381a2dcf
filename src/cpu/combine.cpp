// Merges split-KV partial results: out = sum_s w_s * out_s with w_s = exp(lse_s - lse) and
// lse = log sum_s exp(lse_s). Splits that saw no key (lse_s = -inf) weigh nothing; a row no split
// saw gets out = 0 and lse = -inf. A split that saw keys and holds a NaN (in lse_s, or in out_s
// even when its weight underflowed to 0) makes the row NaN, as one softmax over all keys would.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/element_io.h"
#include "cpu/thread_pool.h"
#include "cpu/workspace.h"

namespace flashattn::cpu {

Status combine(const CombineProblem& c) {
  const int64_t rows = c.batch * c.seqlen;
  const int64_t rows_per_item = 16;
  const WorkerTeam team;
  std::vector<Scratch<float>> acc;
  acc.reserve(size_t(team.size()));
  for (int w = 0; w < team.size(); ++w) acc.emplace_back(size_t(c.head_dim + c.splits));

  team.parallel_for((rows + rows_per_item - 1) / rows_per_item, [&](int64_t item, int worker) {
    float* out_row = acc[size_t(worker)].data();
    float* weights = out_row + c.head_dim;
    const int64_t row_end = std::min(rows, (item + 1) * rows_per_item);
    for (int64_t r = item * rows_per_item; r < row_end; ++r) {
      const int64_t b = r / c.seqlen, i = r % c.seqlen;
      for (int64_t h = 0; h < c.heads; ++h) {
        float max_lse = -INFINITY;
        for (int64_t s = 0; s < c.splits; ++s) {
          const float lse_s = c.lse_partial[c.lse_partial_strides.offset(s, b, i, h)];
          if (lse_s > max_lse || lse_s != lse_s) max_lse = lse_s;
          if (max_lse != max_lse) break;
        }
        std::fill(out_row, out_row + c.head_dim, 0.f);
        float lse = -INFINITY;
        if (max_lse != -INFINITY) {
          float sum = 0.f;
          for (int64_t s = 0; s < c.splits; ++s) {
            weights[s] = std::exp(c.lse_partial[c.lse_partial_strides.offset(s, b, i, h)] - max_lse);
            sum += weights[s];
          }
          for (int64_t s = 0; s < c.splits; ++s) {
            if (c.lse_partial[c.lse_partial_strides.offset(s, b, i, h)] == -INFINITY) continue;  // saw no key
            const float w = weights[s] / sum;
            const float* part = c.out_partial + c.out_partial_strides.offset(s, b, i, h);
            for (int64_t x = 0; x < c.head_dim; ++x) out_row[x] += w * part[x];
          }
          lse = max_lse + std::log(sum);
        }
        store_row(c.out, c.out_strides.offset(0, b, i, h), c.out_dtype, c.head_dim, out_row);
        if (c.lse != nullptr) c.lse[c.lse_strides.offset(0, b, i, h)] = lse;
      }
    }
  });
  return {};
}

}  // namespace flashattn::cpu
