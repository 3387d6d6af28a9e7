// Timing for benchmarks: one warm-up call, then repeated calls until both a minimum time and a
// minimum count are reached; the median is what gets reported (robust on a noisy shared host).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace cpudl::bench {

struct Timing {
  double median_seconds = 0, best_seconds = 0;
  int repetitions = 0;
};

template <class Fn>
Timing time_calls(Fn&& fn, double min_seconds, int min_repetitions = 3, int max_repetitions = 10000) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up: primitive creation, page faults, caches
  std::vector<double> samples;
  const auto start = Clock::now();
  while (static_cast<int>(samples.size()) < max_repetitions &&
         (static_cast<int>(samples.size()) < min_repetitions ||
          std::chrono::duration<double>(Clock::now() - start).count() < min_seconds)) {
    const auto t0 = Clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(samples.begin(), samples.end());
  return Timing{samples[samples.size() / 2], samples.front(), static_cast<int>(samples.size())};
}

}  // namespace cpudl::bench
