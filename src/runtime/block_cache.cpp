// The large-block free lists behind tensor storage (block_cache.h says why).
#include "runtime/block_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

// OpenMP's, declared weak: the library links libgomp, the fuzz targets that build this file alone
// do not (and never set a limit).
extern "C" int omp_in_parallel(void) __attribute__((weak));

namespace cpudl {
namespace {

bool in_parallel_region() { return omp_in_parallel != nullptr && omp_in_parallel() != 0; }

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
std::atomic<std::size_t> g_live{0}, g_peak{0}, g_limit{0};

// Counts `bytes` as live, or throws when that passes the limit.
void account(std::size_t bytes) {
  const std::size_t now = g_live.fetch_add(bytes) + bytes;
  const std::size_t limit = g_limit.load(std::memory_order_relaxed);
  if (limit > 0 && now > limit && !in_parallel_region()) {
    g_live.fetch_sub(bytes);
    throw MemoryLimitError("tensors would need " + byte_size_text(now) + " (an allocation of " +
                               byte_size_text(bytes) + " on top of " + byte_size_text(now - bytes) +
                               ") against a limit of " + byte_size_text(limit),
                           now, limit);
  }
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during static destruction
  return *c;
}

void* system_allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

void* allocate_uncounted(std::size_t bytes);

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
  account(bytes);
  try {
    return allocate_uncounted(bytes);
  } catch (...) {
    g_live.fetch_sub(bytes);
    throw;
  }
}

namespace {
void* allocate_uncounted(std::size_t bytes) {
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
    // A miss gives back at least as many cached bytes as it takes (largest blocks first), so the
    // cache never lifts the process above the peak of its live tensors: activation checkpointing
    // frees a segment's activations to make room for other sizes, and must not find them parked
    // here (measured in docs/DISTRIBUTED.md, "Memory").
    std::size_t released = 0;
    while (released < size && c.cached > 0) {
      auto largest = c.free.end();
      for (auto i = c.free.begin(); i != c.free.end(); ++i)
        if (!i->second.empty() && (largest == c.free.end() || i->first > largest->first)) largest = i;
      std::free(largest->second.back());
      largest->second.pop_back();
      c.cached -= largest->first;
      released += largest->first;
    }
  }
  return system_allocate(size);
}
}  // namespace

void free_block(void* block, std::size_t bytes) {
  if (!block) return;
  bytes = bytes == 0 ? 1 : bytes;
  g_live.fetch_sub(bytes);
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

// Here rather than beside the system information: the tensors' limit errors need it, and the
// fuzz targets build this file alone.
std::string byte_size_text(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (std::uint64_t{1} << 30))
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (std::uint64_t{1} << 20))
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(text, sizeof text, "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  return text;
}

std::size_t live_tensor_bytes() { return g_live.load(); }
std::size_t peak_tensor_bytes() { return g_peak.load(); }
void reset_peak_tensor_bytes() { g_peak.store(g_live.load()); }
void set_tensor_memory_limit(std::size_t bytes) { g_limit.store(bytes); }
std::size_t tensor_memory_limit() { return g_limit.load(); }

}  // namespace cpudl
