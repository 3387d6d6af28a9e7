// Tensor storage: 64-byte aligned blocks, large ones kept for reuse.
//
// glibc serves blocks above its mmap threshold (which it raises to at most 32 MB) with fresh
// mmaps and unmaps them on free, and trims the heap top back to the OS: a training step's large
// activations and gradients (ResNet-18 at 224x224, batch 16: 12-51 MB each) were mapped, faulted
// in page by page, zeroed by the kernel and unmapped again on every step -- page-fault handling
// took ~6% of the step (perf). The CPU guides' answer is to preload jemalloc or tcmalloc; here
// blocks of 1 MB and more are page mappings of our own, and freed ones are kept. A request takes
// the smallest cached block that holds it (the rest of that block stays cached as a block of its
// own) or, when every cached block is smaller, grows the largest with mremap (its faulted pages
// move along): cached memory serves any size, so a steady training or inference loop maps and
// faults nothing after its first step. At most an eighth of physical memory (and 4 GiB) stays
// cached, and never more than keeps live plus cached bytes within one and a half times the highest
// live count so far (since reset_peak_tensor_bytes; the count itself under a tensor memory limit):
// the cache holds little more than the process's live tensors once needed at the same time, and the
// half is what a steady loop's blocks, split and grown into other sizes, need to be served again
// (block_cache.cpp). Under AddressSanitizer nothing is cached (blocks come from malloc), so use-after-free is
// still caught.
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
// The bytes a large request is mapped with (whole pages), and the smallest request that is cached.
std::size_t mapped_block_bytes(std::size_t bytes);
inline constexpr std::size_t kMinCachedBlock = std::size_t{1} << 20;

// The accounting of live tensor bytes and its limit: cpudl/runtime.h.

}  // namespace cpudl
