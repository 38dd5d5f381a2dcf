// Scratch memory of the CPU backend, counted so that tests and the benchmark can show that the
// tiled path needs O(seqlen) memory (cpu_workspace_stats in the public API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace flashattn::cpu {

void workspace_allocated(std::size_t bytes);
void workspace_released(std::size_t bytes);

// An owned, 64-byte aligned, uninitialised array of T whose bytes are counted.
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::size_t count) { reset(count); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&& other) noexcept : data_(other.data_), count_(other.count_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  ~Scratch() { release(); }

  void reset(std::size_t count) {
    release();
    if (count == 0) return;
    const std::size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(::operator new(bytes, std::align_val_t(64)));
    count_ = count;
    workspace_allocated(bytes);
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return count_; }

 private:
  void release() {
    if (data_ == nullptr) return;
    workspace_released((count_ * sizeof(T) + 63) / 64 * 64);
    ::operator delete(data_, std::align_val_t(64));
    data_ = nullptr;
    count_ = 0;
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace flashattn::cpu
