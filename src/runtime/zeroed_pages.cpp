// Anonymous mappings for large buffers (zeroed_pages.h says why).
#include "runtime/zeroed_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpudl/error.h"

namespace cpudl {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMapped = false;
#else
constexpr bool kMapped = true;
#endif

constexpr std::size_t kPage = 4096, kHugePage = std::size_t{2} << 20;

std::size_t mapped_bytes(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
}

[[noreturn]] void out_of_memory(std::size_t bytes) {
  throw Error("out of memory mapping " + std::to_string(bytes) + " bytes");
}

}  // namespace

void* map_zeroed_pages(std::size_t bytes, PageSize pages) {
  if (!kMapped) {
    void* p = std::aligned_alloc(64, (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64);
    if (!p) out_of_memory(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  const std::size_t size = mapped_bytes(bytes);
  if (pages == PageSize::small || size < kHugePage) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) out_of_memory(bytes);
    return p;
  }
  // A huge page needs a 2 MiB-aligned range: map one huge page more and unmap the ends.
  void* whole = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (whole == MAP_FAILED) out_of_memory(bytes);
  const auto begin = reinterpret_cast<std::uintptr_t>(whole);
  const std::uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) munmap(whole, aligned - begin);
  if (const std::uintptr_t tail = begin + size + kHugePage - (aligned + size); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + size), tail);
  // Advice only: where transparent huge pages are off the mapping keeps 4 KiB pages.
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmap_zeroed_pages(void* p, std::size_t bytes) {
  if (!kMapped)
    std::free(p);
  else
    munmap(p, mapped_bytes(bytes));
}

void clear_zeroed_pages(void* p, std::size_t bytes) {
  // MADV_DONTNEED on a private anonymous mapping: the next read of a page sees zeros.
  if (!kMapped || madvise(p, mapped_bytes(bytes), MADV_DONTNEED) != 0) std::memset(p, 0, bytes);
}

}  // namespace cpudl
