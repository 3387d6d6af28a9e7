// Counts the test binary's C++ heap allocations (global operator new replaced by a counting
// malloc), so tests can assert that a steady-state path allocates nothing. While armed, each
// allocation's caller is looked up: oneDNN 2.6 builds a std::unordered_map of the arguments inside
// every dnnl_primitive_execute, which no caller can avoid, so those are counted apart.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "allocation_counter.h"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<long> g_ours{0}, g_onednn{0};

void count(void* caller) {
  Dl_info info;
  if (dladdr(caller, &info) != 0 && info.dli_fname && std::strstr(info.dli_fname, "libdnnl"))
    g_onednn.fetch_add(1, std::memory_order_relaxed);
  else
    g_ours.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

namespace cpudl::testing {
AllocationCount count_allocations(const std::function<void()>& fn) {
  g_ours = 0;
  g_onednn = 0;
  g_armed = true;
  fn();
  g_armed = false;
  return {g_ours.load(), g_onednn.load()};
}
}  // namespace cpudl::testing

void* operator new(std::size_t size) {
  if (g_armed.load(std::memory_order_relaxed)) count(__builtin_return_address(0));
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (g_armed.load(std::memory_order_relaxed)) count(__builtin_return_address(0));
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// Every unaligned form is replaced together, nothrow ones included: operator delete below frees
// with free(), so nothing may come from the default (or a sanitizer's) operator new.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (g_armed.load(std::memory_order_relaxed)) count(__builtin_return_address(0));
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  if (g_armed.load(std::memory_order_relaxed)) count(__builtin_return_address(0));
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
