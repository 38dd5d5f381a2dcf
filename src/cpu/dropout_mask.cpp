// The dropout keep-mask as a tensor, for tests that compare backends bit for bit.
#include "common/philox.h"
#include "cpu/cpu_backend.h"
#include "cpu/thread_pool.h"

namespace flashattn::cpu {

void dropout_mask(const DropoutArgs& args, int64_t batch, int64_t heads, int64_t seqlen_q,
                  int64_t seqlen_k, uint8_t* mask) {
  const uint32_t threshold = dropout_threshold(args.dropout_p);
  WorkerTeam().parallel_for(batch * heads, [&](int64_t item, int) {
    const int64_t b = item / heads, h = item % heads;
    uint8_t* m = mask + item * seqlen_q * seqlen_k;
    for (int64_t i = 0; i < seqlen_q; ++i)
      for (int64_t j = 0; j < seqlen_k; ++j)
        m[i * seqlen_k + j] =
            dropout_keep(args.dropout_seed, args.dropout_offset, b, heads, h, i, j, threshold) ? 1 : 0;
  });
}

}  // namespace flashattn::cpu
