// A growable scratch buffer whose data starts on a cache line: kept per thread (thread_local) by
// kernels' drivers, so that a steady loop allocates nothing after its first call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace cpudl {

struct AlignedBuffer {
  std::vector<float> storage;
  // At least n floats, 64-byte aligned; contents are not kept across calls that grow it.
  float* get(std::size_t n) {
    if (storage.size() < n + 16) storage.resize(n + 16);
    return reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 63) &
                                    ~std::uintptr_t{63});
  }
};

// A fixed block of n floats, 64-byte aligned and left uninitialised, for scratch that is written
// whole before it is read and must outlive one call (a training step's expanded weights, from the
// forward pass to the backward): std::vector would write zeros over it first, a wasted pass over
// tens of megabytes per step.
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(std::size_t n)
      : data_(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64))) {
    if (!data_) throw std::bad_alloc();
  }
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
};

}  // namespace cpudl
