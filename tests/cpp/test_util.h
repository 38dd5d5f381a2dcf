// Helpers shared by the host tests: owning host tensors, random fills, error metrics.
#pragma once

#include <cmath>
#include <cstdint>
#include <cctype>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "cpu/element_io.h"
#include "flashattn/flashattn.h"

namespace flashattn::test {

// An owned, contiguous host tensor; view() describes it to the API.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    bytes_.assign(size_t(numel()) * dtype_size(dtype_) + 64, 0);
  }
  // Copies keep the data, not the raw buffer: the aligned start may sit elsewhere in the copy.
  HostTensor(const HostTensor& other) : dtype_(other.dtype_), shape_(other.shape_) {
    bytes_.assign(other.bytes_.size(), 0);
    if (!shape_.empty()) std::memcpy(data(), other.data(), size_t(numel()) * dtype_size(dtype_));
  }
  HostTensor& operator=(const HostTensor& other) {
    if (this != &other) *this = HostTensor(other);
    return *this;
  }
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
  }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  void* data() { return aligned(); }
  const void* data() const { return const_cast<HostTensor*>(this)->aligned(); }
  template <typename T>
  T* as() { return static_cast<T*>(data()); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data()); }

  TensorView view() const {
    if (shape_.empty()) return {};
    TensorView v;
    v.data = const_cast<void*>(data());
    v.dtype = dtype_;
    v.ndim = int(shape_.size());
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      v.shape[d] = shape_[d];
      v.stride[d] = stride;
      stride *= shape_[d];
    }
    return v;
  }
  float get(int64_t i) const { return cpu::load_element(data(), i, dtype_); }
  void set(int64_t i, float x) { cpu::store_element(data(), i, dtype_, x); }
  std::vector<float> to_float() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = get(i);
    return out;
  }
  // Fills with N(0, stddev) rounded to the dtype.
  void fill_normal(std::mt19937_64& rng, float stddev = 1.f) {
    std::normal_distribution<float> dist(0.f, stddev);
    for (int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
  }
  void fill_uniform(std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
  }
  // A value no correct kernel writes, so unwritten elements are caught.
  void poison() {
    for (int64_t i = 0; i < numel(); ++i) set(i, std::nanf(""));
  }

 private:
  void* aligned() {
    auto p = reinterpret_cast<uintptr_t>(bytes_.data());
    return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
  }
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
};

inline HostTensor int_tensor(const std::vector<int32_t>& values) {
  HostTensor t(DType::I32, {int64_t(values.size())});
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * 4);
  return t;
}

// max |a - b| over elements, treating matching infinities as equal and any NaN as infinite error.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && std::isinf(b[i]) && (a[i] > 0) == (b[i] > 0)) continue;
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d) || std::isinf(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

// GoogleTest names allow letters, digits and '_' only.
inline std::string param_test_name(size_t index, std::string name) {
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return std::to_string(index) + "_" + name;
}

// GoogleTest's name generator for parameters that have name(): "<index>_<name>", e.g.
// INSTANTIATE_TEST_SUITE_P(Sweep, Suite, ::testing::ValuesIn(cases), ParamTestName()).
struct ParamTestName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    return param_test_name(info.index, info.param.name());
  }
};

inline double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a)
    if (std::isfinite(x)) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace flashattn::test
