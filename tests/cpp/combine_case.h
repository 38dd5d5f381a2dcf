// combine() checked in double: random partials with empty splits and empty rows, dense or varlen
// layout. The runner lets GPU tests mirror the call onto the device.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::test {

struct CombineCase {
  int splits = 5, batch = 3, seqlen = 13, heads = 4, head_dim = 40;
  bool varlen = false;  // (splits, total, heads, d) partials; batch is then 1 and seqlen the total
  DType out_dtype = DType::F32;
  bool with_lse = true;      // softmax_lse is optional
  float empty_share = 0.f;   // share of the other partial LSEs set to -inf (empty splits)
  uint64_t seed = 99;

  std::string name() const;
};

using CombineRunner = std::function<Status(const CombineParams&)>;
// Row (b=0, h=0, i=0) is empty in every split, row i=1 in all but split 2 (when they exist).
void check_combine_case(const CombineCase& c, Backend backend, const CombineRunner& runner = {});
// The fixed case every backend runs: 5 splits, 3 x 13 rows (varlen: 37), 4 heads, d40.
void check_combine(bool varlen, DType out_dtype, Backend backend, const CombineRunner& runner = {});

}  // namespace flashattn::test
