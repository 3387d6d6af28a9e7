// Large, long-lived buffers as anonymous page mappings: an LLM's KV cache and the weight panels
// repacked at load.
//
// A mapping reads as zero until written and commits memory only as pages are first written, so
// a 4096-token KV cache costs nothing until the context fills (std::vector wrote zeros over all
// of it at construction: a 150 MB pass for a 134M model, gigabytes for a 7B one), and clearing
// it hands the pages back (MADV_DONTNEED) instead of writing zeros again per request. Mappings of
// 2 MiB and more are aligned to 2 MiB and advised to transparent huge pages: a repacked matrix is
// written whole once at load, and 4 KiB pages made loading pay a page fault per 4 KiB (a third
// of the 134M Q4_0 model's load time under this VM's hypervisor). A KV cache keeps 4 KiB pages:
// its rows are spread over every layer and head, so 2 MiB pages would commit all of it with the
// first token. Under AddressSanitizer the buffers come from malloc, so overruns are still caught.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace cpudl {

enum class PageSize { small, huge };
// `bytes` of zeroed memory, 64-byte aligned at least; throws Error when the system has none.
// PageSize::huge: 2 MiB pages where the kernel gives them (for buffers written whole).
void* map_zeroed_pages(std::size_t bytes, PageSize pages);
void unmap_zeroed_pages(void* p, std::size_t bytes);
// Makes every byte read as zero again, releasing the pages where the memory is a mapping.
void clear_zeroed_pages(void* p, std::size_t bytes);

// n zero-initialised values of a trivial type on their own 4 KiB pages.
template <class T>
class ZeroedPages {
  static_assert(std::is_trivial_v<T>);

 public:
  ZeroedPages() = default;
  explicit ZeroedPages(std::size_t n)
      : data_(static_cast<T*>(map_zeroed_pages(n * sizeof(T), PageSize::small))), size_(n) {}
  ZeroedPages(ZeroedPages&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ZeroedPages& operator=(ZeroedPages&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~ZeroedPages() {
    if (data_) unmap_zeroed_pages(data_, size_ * sizeof(T));
  }
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  void clear() {
    if (data_) clear_zeroed_pages(data_, size_ * sizeof(T));
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// The same on huge pages, shared: what a model's matrices hold and their contexts read.
template <class T>
std::shared_ptr<T[]> shared_zeroed_pages(std::size_t n) {
  static_assert(std::is_trivial_v<T>);
  const std::size_t bytes = n * sizeof(T);
  return std::shared_ptr<T[]>(static_cast<T*>(map_zeroed_pages(bytes, PageSize::huge)),
                              [bytes](T* p) { unmap_zeroed_pages(p, bytes); });
}

}  // namespace cpudl
