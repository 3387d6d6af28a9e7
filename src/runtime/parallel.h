// Splitting work across the one compute pool (OpenMP). Internal: kernels stay single-threaded
// and ops call this to spread contiguous ranges over the threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cpudl/runtime.h"

namespace cpudl {

// Calls fn(begin, end) on at most `threads` disjoint ranges covering [0, n), each at least
// `grain` long (so small tensors stay on one thread and pay no fork/join).
// How many ranges parallel_for makes of n.
inline int parallel_chunks(std::size_t n, std::size_t grain, int threads) {
  const std::size_t max_chunks = std::max<std::size_t>(1, n / std::max<std::size_t>(1, grain));
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, threads)), max_chunks));
}

template <class Fn>
void parallel_for(std::size_t n, std::size_t grain, int threads, Fn&& fn) {
  if (n == 0) return;
  const int chunks = parallel_chunks(n, grain, threads);
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

// Weight gradients summed over a batch: images split over the threads, each thread adding its
// images' terms (add(n, slice) for image n) into its own zeroed slice of `size` floats; the
// slices are then added. The per-thread order of images is fixed, so results do not depend on
// scheduling.
template <class AddImage>
std::vector<float> sum_over_images(std::size_t batch, std::size_t size, const AddImage& add) {
  const int threads = std::max(1, std::min<int>(compute_threads(), static_cast<int>(batch)));
  const auto parts = static_cast<std::size_t>(threads);
  std::vector<float> sums(parts * size, 0.0f);
  parallel_for(parts, 1, threads, [&](std::size_t first, std::size_t last) {
    for (std::size_t part = first; part < last; ++part)
      for (std::size_t n = batch * part / parts; n < batch * (part + 1) / parts; ++n)
        add(n, sums.data() + part * size);
  });
  for (std::size_t t = 1; t < parts; ++t)
    for (std::size_t i = 0; i < size; ++i) sums[i] += sums[t * size + i];
  sums.resize(size);
  return sums;
}

}  // namespace cpudl
