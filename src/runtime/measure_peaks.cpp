// Measures the roofs that speed claims are judged against: fp32 multiply-add throughput and
// memory read bandwidth, on one core and on the whole pool, with the kernels the table chose.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best-of-N GFLOP/s of the FMA probe on `threads` threads, each running `iterations`.
double fma_gflops(kernels::FmaProbeFn probe, int threads, std::uint64_t iterations, int repeats) {
  double best = 0;
  std::vector<float> sinks(static_cast<std::size_t>(threads) * 16);
  for (int r = 0; r < repeats; ++r) {
    std::uint64_t flops = 0;
    const auto start = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += probe(iterations, &sinks[static_cast<std::size_t>(omp_get_thread_num()) * 16]);
    best = std::max(best, static_cast<double>(flops) / seconds_since(start) * 1e-9);
  }
  return best;
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

MeasuredPeaks measure_peaks(double seconds) {
  const Runtime& rt = runtime();
  const kernels::KernelTable& table = kernels::kernel_table();
  MeasuredPeaks peaks;
  peaks.threads = rt.threads.threads;
  peaks.fma_kernel = table.f32_fma_probe.name;
  peaks.bandwidth_kernel = table.f32_sum.name;

  // Calibrate the FMA probe to ~seconds/8 per timed run (2 runs x 2 configurations).
  float sink = 0;
  std::uint64_t iterations = 1 << 16;
  for (;;) {
    const auto start = Clock::now();
    table.f32_fma_probe.fn(iterations, &sink);
    const double t = seconds_since(start);
    if (t > 0.01 || iterations > (std::uint64_t{1} << 40)) {
      iterations = static_cast<std::uint64_t>(static_cast<double>(iterations) * (seconds / 8) / std::max(t, 1e-6));
      break;
    }
    iterations *= 4;
  }
  iterations = std::max<std::uint64_t>(iterations, 1024);
  peaks.fp32_gflops_one_core = fma_gflops(table.f32_fma_probe.fn, 1, iterations, 2);
  peaks.fp32_gflops_all_cores = fma_gflops(table.f32_fma_probe.fn, peaks.threads, iterations, 2);

  // Read bandwidth over a buffer far larger than the last-level cache, first touched by the
  // threads that read it (so pages land on their NUMA nodes).
  std::uint64_t bytes = std::uint64_t{256} << 20;
  if (rt.system.l3_bytes) bytes = std::max<std::uint64_t>(bytes, *rt.system.l3_bytes * 8);
  if (rt.system.mem_available_bytes) bytes = std::min<std::uint64_t>(bytes, *rt.system.mem_available_bytes / 4);
  const std::size_t n = static_cast<std::size_t>(bytes / sizeof(float)) / 64 * 64;
  std::unique_ptr<float, AlignedFree> buffer(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  if (!buffer) return peaks;
  float* data = buffer.get();
  parallel_for(n, 1 << 16, peaks.threads, [&](std::size_t b, std::size_t e) {
    std::fill(data + b, data + e, 1.0f);
  });

  auto bandwidth = [&](int threads) {
    double best = 0;
    const auto budget_start = Clock::now();
    for (int r = 0; r < 8 && (r < 2 || seconds_since(budget_start) < seconds / 4); ++r) {
      std::vector<float> partial(static_cast<std::size_t>(threads), 0.0f);
      const auto start = Clock::now();
      parallel_for(n, 1 << 16, threads, [&](std::size_t b, std::size_t e) {
        partial[static_cast<std::size_t>(omp_get_thread_num())] = table.f32_sum.fn(data + b, e - b);
      });
      best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds_since(start) * 1e-9);
      sink += partial[0];
    }
    return best;
  };
  peaks.bandwidth_gbs_one_core = bandwidth(1);
  peaks.bandwidth_gbs_all_cores = bandwidth(peaks.threads);
  [[maybe_unused]] static volatile float observed;  // the probes' results must be observable, or they vanish
  observed = sink;
  return peaks;
}

}  // namespace cpudl
