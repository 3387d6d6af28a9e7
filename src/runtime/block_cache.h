// Tensor storage: 64-byte aligned blocks, large ones kept for reuse.
//
// glibc serves blocks above its mmap threshold (which it raises to at most 32 MB) with fresh
// mmaps and unmaps them on free, and trims the heap top back to the OS: a training step's large
// activations and gradients (ResNet-18 at 224x224, batch 16: 12-51 MB each) were mapped, faulted
// in page by page, zeroed by the kernel and unmapped again on every step -- page-fault handling
// took ~6% of the step (perf). The CPU guides' answer is to preload jemalloc or tcmalloc; here
// freed blocks of 1 MB and more go to a free list by size class (the next 1/8 step of a power of
// two, so at most 12.5% is wasted) and the next request of that class takes one back. A steady
// training or inference loop asks for the same sizes every step, so after the first it maps
// nothing. At most an eighth of physical memory (and 4 GiB) stays cached; beyond that blocks are
// freed, and a request the cache cannot serve first frees as many cached bytes as it takes, so
// the cache holds only memory the process's live tensors once needed at the same time. Under AddressSanitizer
// nothing is cached, so use-after-free is still caught.
#pragma once

#include <cstddef>

namespace cpudl {

// Blocks of at least 64 bytes' alignment; allocate_block never returns null (it throws Error).
void* allocate_block(std::size_t bytes);
// bytes: as passed to allocate_block.
void free_block(void* block, std::size_t bytes);
// Returns every cached block to the system.
void release_cached_blocks();
// The bytes of freed blocks held for reuse, and whether blocks are cached at all (not under ASan).
std::size_t cached_block_bytes();
bool block_cache_enabled();
// The size a large request is served with (its class), and the smallest request that is cached.
std::size_t block_size_class(std::size_t bytes);
inline constexpr std::size_t kMinCachedBlock = std::size_t{1} << 20;

// The accounting of live tensor bytes and its limit: cpudl/runtime.h.

}  // namespace cpudl
