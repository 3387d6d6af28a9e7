// How the process's allocator treats freed memory. The runtime starts in the batch policy (blocks
// up to 32 MiB stay in the heap: a training step reuses the last one's activations instead of
// page-faulting them in again). A server switches to the serving policy at start.
#pragma once

namespace cpudl {

// Blocks of 256 KiB and more are mapped and unmapped per allocation, at most four arenas, and
// each heap is trimmed past 4 MiB free: a server's request bodies, parsed tensors and responses
// (0.2-10 MB, allocated and freed on hundreds of connection threads) otherwise stayed in glibc's
// heaps, fragmented, and resident memory kept growing under load (ResNet-18 JSON requests at 1x:
// 924 MB at start, 1,611 after a minute, the heaps 74 -> 206 MB in 30 s; with this policy
// 1,006-1,043 MB through the minute). Tensor blocks of 1 MiB and more still go through the
// block cache (runtime/block_cache.h). GLIBC_TUNABLES, when set, still wins.
void use_serving_memory_policy();

}  // namespace cpudl
