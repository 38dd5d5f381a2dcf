// Host tensors for the benchmark: owned, 64-byte aligned, filled with random normal values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape);

  void* data() const { return data_.get(); }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  std::size_t bytes() const { return std::size_t(numel_) * dtype_size(dtype_); }
  // A contiguous view on the host (or, with device = Cuda, a view of the same shape whose data
  // pointer the caller replaces).
  TensorView view() const { return view_; }
  // Element i as float, whatever the dtype.
  float get(int64_t i) const;

 private:
  struct FreeAligned {
    void operator()(void* p) const;
  };
  DType dtype_ = DType::F32;
  int64_t numel_ = 0;
  std::unique_ptr<void, FreeAligned> data_;
  TensorView view_;
};

// An int32 tensor of `shape` holding `values` (as many as the shape has elements).
HostTensor int32_tensor(const std::vector<int32_t>& values, std::initializer_list<int64_t> shape);

// Fills `count` elements of `dtype` at dst with N(0, 1) values (never all zeros: the softmax of
// zeros is uniform and hides bugs and fast paths alike). Values come from a precomputed pool of a
// prime length, copied from a pseudo-random start, so filling gigabytes takes milliseconds while
// no two rows of a tensor line up with the same values.
void fill_random_normal(void* dst, DType dtype, int64_t count, uint64_t seed);

}  // namespace flashattn::bench
