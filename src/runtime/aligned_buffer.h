// A growable scratch buffer whose data starts on a cache line: kept per thread (thread_local) by
// kernels' drivers, so that a steady loop allocates nothing after its first call.
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace cpudl
