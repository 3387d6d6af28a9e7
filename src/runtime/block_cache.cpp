// The large-block free lists behind tensor storage (block_cache.h says why).
#include "runtime/block_cache.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpudl/error.h"

namespace cpudl {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;
#else
constexpr bool kCaching = true;
#endif

std::size_t max_cached_bytes() {
  static const std::size_t limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const std::size_t eighth = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page / 8 : 0;
    return std::min(eighth, std::size_t{4} << 30);
  }();
  return limit;
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free;  // by size class
  std::size_t cached = 0;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during static destruction
  return *c;
}

void* system_allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

}  // namespace

// Requests of one class share a block size: the next multiple of an eighth of the largest power
// of two not above the request (1 MiB -> 1 MiB; 1.1 MiB -> 1.125 MiB; 49 MiB -> 52 MiB).
std::size_t block_size_class(std::size_t bytes) {
  const std::size_t step = std::max<std::size_t>(std::bit_floor(bytes) / 8, 64);
  return (bytes + step - 1) / step * step;
}

bool block_cache_enabled() { return kCaching; }

void* allocate_block(std::size_t bytes) {
  bytes = bytes == 0 ? 1 : bytes;
  if (!kCaching || bytes < kMinCachedBlock) return system_allocate(bytes);
  const std::size_t size = block_size_class(bytes);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free.find(size);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached -= size;
      return p;
    }
  }
  return system_allocate(size);
}

void free_block(void* block, std::size_t bytes) {
  if (!block) return;
  bytes = bytes == 0 ? 1 : bytes;
  if (!kCaching || bytes < kMinCachedBlock) {
    std::free(block);
    return;
  }
  const std::size_t size = block_size_class(bytes);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached + size <= max_cached_bytes()) {
      c.free[size].push_back(block);
      c.cached += size;
      return;
    }
  }
  std::free(block);
}

void release_cached_blocks() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [size, blocks] : c.free)
    for (void* p : blocks) std::free(p);
  c.free.clear();
  c.cached = 0;
}

std::size_t cached_block_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.cached;
}

}  // namespace cpudl
