// Splitting work across the one compute pool (OpenMP). Internal: kernels stay single-threaded
// and ops call this to spread contiguous ranges over the threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>

#include "cpudl/runtime.h"

namespace cpudl {

// Calls fn(begin, end) on at most `threads` disjoint ranges covering [0, n), each at least
// `grain` long (so small tensors stay on one thread and pay no fork/join).
template <class Fn>
void parallel_for(std::size_t n, std::size_t grain, int threads, Fn&& fn) {
  if (n == 0) return;
  const std::size_t max_chunks = std::max<std::size_t>(1, n / std::max<std::size_t>(1, grain));
  const int chunks =
      static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, threads)), max_chunks));
  if (chunks == 1 || omp_in_parallel()) {
    fn(std::size_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(chunks)
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    const auto count = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t begin = n * t / count, end = n * (t + 1) / count;
    if (begin < end) fn(begin, end);
  }
}

template <class Fn>
void parallel_for(std::size_t n, std::size_t grain, Fn&& fn) {
  parallel_for(n, grain, compute_threads(), static_cast<Fn&&>(fn));
}

}  // namespace cpudl
