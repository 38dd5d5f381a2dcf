// The fp8 descale factors of a problem: one float per (sequence, kv head), read through strides so
// that any layout the API accepts (including stride-0 broadcasts of one per-tensor factor) needs no
// copy. Absent = 1: inputs that are not fp8 never carry them (validation refuses that).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct DescaleView {
  const float* data = nullptr;  // nullptr: a factor of 1 everywhere
  int64_t batch_stride = 0;
  int64_t head_stride = 0;

  FA_HD bool defined() const { return data != nullptr; }
  // The factor of sequence b, kv head head_k.
  FA_HD float at(int64_t b, int64_t head_k) const {
    return data != nullptr ? data[b * batch_stride + head_k * head_stride] : 1.f;
  }
};

}  // namespace flashattn
