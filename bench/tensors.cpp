#include "tensors.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <stdexcept>

#include "cpu/element_io.h"

namespace flashattn::bench {

void HostTensor::FreeAligned::operator()(void* p) const { std::free(p); }

HostTensor::HostTensor(DType dtype, std::initializer_list<int64_t> shape) : dtype_(dtype) {
  numel_ = 1;
  for (int64_t s : shape) numel_ *= s;
  // aligned_alloc wants a size that is a multiple of the alignment; never zero.
  const std::size_t size = (std::max<std::size_t>(bytes(), 1) + 63) / 64 * 64;
  data_.reset(std::aligned_alloc(64, size));
  if (!data_) throw std::bad_alloc();
  view_ = TensorView::contiguous(data_.get(), dtype, shape);
}

float HostTensor::get(int64_t i) const { return cpu::load_element(data_.get(), i, dtype_); }

HostTensor int32_tensor(const std::vector<int32_t>& values, std::initializer_list<int64_t> shape) {
  HostTensor t(DType::I32, shape);
  if (size_t(t.numel()) != values.size()) throw std::invalid_argument("int32_tensor: values do not fill the shape");
  if (!values.empty()) std::memcpy(t.data(), values.data(), t.bytes());
  return t;
}

namespace {

constexpr int64_t kPoolElements = 1048573;  // prime, so pool copies drift against row lengths

const std::vector<uint8_t>& normal_pool(DType dtype) {
  static std::mutex mutex;
  static std::map<DType, std::vector<uint8_t>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  auto& pool = pools[dtype];
  if (pool.empty()) {
    pool.resize(std::size_t(kPoolElements) * dtype_size(dtype));
    std::mt19937_64 rng(0x5eed5eedULL);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t i = 0; i < kPoolElements; ++i) cpu::store_element(pool.data(), i, dtype, normal(rng));
  }
  return pool;
}

}  // namespace

void fill_random_normal(void* dst, DType dtype, int64_t count, uint64_t seed) {
  const std::vector<uint8_t>& pool = normal_pool(dtype);
  const std::size_t element = dtype_size(dtype);
  std::mt19937_64 rng(seed);
  auto* out = static_cast<uint8_t*>(dst);
  int64_t done = 0;
  while (done < count) {
    const int64_t start = int64_t(rng() % uint64_t(kPoolElements));
    const int64_t n = std::min(count - done, kPoolElements - start);
    std::memcpy(out + std::size_t(done) * element, pool.data() + std::size_t(start) * element,
                std::size_t(n) * element);
    done += n;
  }
}

}  // namespace flashattn::bench
