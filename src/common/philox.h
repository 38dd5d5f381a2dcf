// Counter-based Philox4x32-10 and the dropout keep-mask built on it. Every backend draws the
// same bits for the same (seed, offset, batch, head, row, key), so GPU kernels reproduce the CPU
// mask exactly.
//
// Mapping (the contract every kernel implements):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (key_index / 4, row, lo32(s), hi32(s))  with s = offset + batch * heads + head
//   r       = output word (key_index % 4) of Philox4x32-10(counter, key)
//   keep    = r >= threshold,  threshold = dropout_p * 2^32 (rounded down, capped at 2^32 - 1)
// row and key_index are positions inside the sequence (not the packed varlen index), head is the
// query head.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct Philox4 {
  uint32_t x, y, z, w;
};

FA_HD void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

FA_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMul0, c.x, hi0, lo0);
    mul_hi_lo(kMul1, c.z, hi1, lo1);
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

FA_HD uint32_t dropout_threshold(float dropout_p) {
  const double t = double(dropout_p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xffffffffu : uint32_t(t);
}

// The four random words for keys [4*(key/4), 4*(key/4) + 4) of one row.
FA_HD Philox4 dropout_bits(uint64_t seed, uint64_t offset, int64_t batch, int64_t heads, int64_t head,
                           int64_t row, int64_t key) {
  const uint64_t s = offset + uint64_t(batch) * uint64_t(heads) + uint64_t(head);
  const Philox4 counter{uint32_t(uint64_t(key) >> 2), uint32_t(row), uint32_t(s), uint32_t(s >> 32)};
  return philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32));
}

FA_HD uint32_t philox_word(const Philox4& r, int i) {
  return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
}

FA_HD bool dropout_keep(uint64_t seed, uint64_t offset, int64_t batch, int64_t heads, int64_t head,
                        int64_t row, int64_t key, uint32_t threshold) {
  const Philox4 r = dropout_bits(seed, offset, batch, heads, head, row, key);
  return philox_word(r, int(key & 3)) >= threshold;
}

}  // namespace flashattn
