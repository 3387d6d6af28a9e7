// The large-block free lists behind tensor storage (block_cache.h says why).
#include "runtime/block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

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

constexpr std::size_t kPage = 4096;

std::size_t max_cached_bytes() {
  static const std::size_t limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const std::size_t eighth = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page / 8 : 0;
    return std::min(eighth, std::size_t{4} << 30);
  }();
  return limit;
}

// Freed mappings by size. Every block is its own page range, so a range can be split (munmap or
// reuse any page-aligned part) and moved or grown (mremap) independently of its neighbours.
struct Cache {
  std::mutex mutex;
  std::multimap<std::size_t, void*> free;
  std::size_t cached = 0;
};
// g_peak, the highest live count since reset_peak_tensor_bytes, is also the bound the cache keeps
// live + cached bytes under.
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

[[noreturn]] void out_of_memory(std::size_t bytes) {
  throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
}

void* system_allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) out_of_memory(bytes);
  return p;
}

void* map_pages(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) out_of_memory(bytes);
  return p;
}

void unmap_pages(void* p, std::size_t bytes) { munmap(p, bytes); }

// Takes the largest cached block out of `c` (which must hold one).
std::pair<void*, std::size_t> take_largest(Cache& c) {
  const auto last = std::prev(c.free.end());
  const std::pair<void*, std::size_t> block{last->second, last->first};
  c.free.erase(last);
  c.cached -= block.second;
  return block;
}

void* allocate_uncounted(std::size_t bytes);

}  // namespace

std::size_t mapped_block_bytes(std::size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

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
  const std::size_t size = mapped_block_bytes(bytes);
  void* block = nullptr;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (const auto fit = c.free.lower_bound(size); fit != c.free.end()) {
      // The smallest block that holds the request: its head serves it, its tail stays cached
      // (or, under the smallest cached size, goes back to the system).
      block = fit->second;
      const std::size_t whole = fit->first;
      c.free.erase(fit);
      c.cached -= whole;
      if (whole - size >= kMinCachedBlock) {
        c.free.emplace(whole - size, static_cast<char*>(block) + size);
        c.cached += whole - size;
      } else if (whole > size) {
        unmap_pages(static_cast<char*>(block) + size, whole - size);
      }
    } else if (!c.free.empty()) {
      // Every cached block is smaller: the largest grows into the request, its pages (already
      // faulted in) moving with it, so only the difference is new.
      const auto [old, old_size] = take_largest(c);
      block = mremap(old, old_size, size, MREMAP_MAYMOVE);
      if (block == MAP_FAILED) {
        unmap_pages(old, old_size);
        block = nullptr;
      }
    }
    // The cache never lifts the process above the peak of its live tensors: blocks go back to the
    // system (the smallest that covers the excess, else the largest) until live plus cached bytes
    // are within it. Activation
    // checkpointing frees a segment's activations to make room for other sizes, and must not find
    // them parked here (measured in docs/DISTRIBUTED.md, "Memory"). Because any cached block can
    // serve any request (split or grown), the bound costs no page faults in a steady loop: with
    // free lists per size class ResNet-18's bf16 training step at 224x224 missed ~40 times a step
    // under it and page-faulted 100 MB in afresh (15% of the step).
    //
    // Half the peak again is allowed above it: requests served by the head of a larger block, or
    // by growing one, leave the cached blocks in other sizes than the next step asks for, and held
    // to the peak itself a steady loop unmapped and re-faulted some every step -- LeNet-5's training
    // step at batch 256 page-faulted ~5.6 MB a step (1,370 faults, under this VM's hypervisor half
    // the step: 26-28 ms, against 8.3 with the slack; a quarter of the peak still faulted 3.7 MB a
    // step). Under a tensor memory limit (train --max-memory) the bound stays the peak.
    const std::size_t peak = g_peak.load(std::memory_order_relaxed);
    const std::size_t bound = g_limit.load(std::memory_order_relaxed) > 0 ? peak : peak + peak / 2;
    while (!c.free.empty() && g_live.load(std::memory_order_relaxed) + c.cached > bound) {
      const std::size_t excess = g_live.load(std::memory_order_relaxed) + c.cached - bound;
      auto victim = c.free.lower_bound(excess);
      if (victim == c.free.end()) victim = std::prev(c.free.end());
      unmap_pages(victim->second, victim->first);
      c.cached -= victim->first;
      c.free.erase(victim);
    }
  }
  return block ? block : map_pages(size);
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
  const std::size_t size = mapped_block_bytes(bytes);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached + size <= max_cached_bytes()) {
      c.free.emplace(size, block);
      c.cached += size;
      return;
    }
  }
  unmap_pages(block, size);
}

void release_cached_blocks() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (const auto& [size, block] : c.free) unmap_pages(block, size);
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
