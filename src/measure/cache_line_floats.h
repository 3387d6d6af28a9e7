// Benchmark buffers that start on a cache line, as tensor storage does (runtime/block_cache.cpp).
// Kernels that stream their output only from a line-aligned address (the row kernels, the
// pointwise GEMM of 1x1 convolutions) would otherwise time another path than training runs:
// std::vector's large blocks start 16 bytes past a page, and a row would time the regular-store
// path (ResNet-18's layer2 1x1/2 forward ran a quarter slower on it).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace cpudl::bench {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

using CacheLineFloats = std::vector<float, CacheLineAllocator<float>>;

}  // namespace cpudl::bench
