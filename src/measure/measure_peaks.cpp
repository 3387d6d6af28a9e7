// Measures the roofs that speed claims are judged against: compute throughput (fp32 FMA, int8
// and bf16 dot products) and memory read bandwidth, with the kernels the table chose.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/dispatch.h"
#include "runtime/parallel.h"
#include "runtime/read_text.h"

namespace cpudl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double process_cpu_seconds() {
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return -1;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::optional<double> one_minute_load_average() {
  const auto text = read_text("/proc/loadavg");
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  return end != text->c_str() ? std::optional<double>(v) : std::nullopt;
}

[[maybe_unused]] volatile float g_observed;  // the probes' results must be observable, or they vanish

const kernels::KernelVariant<kernels::FmaProbeFn>& probe_for(ComputeRoof roof) {
  const kernels::KernelTable& table = kernels::kernel_table();
  switch (roof) {
    case ComputeRoof::int8_dot:
      return table.int8_dot_probe;
    case ComputeRoof::bf16_dot:
      return table.bf16_dot_probe;
    case ComputeRoof::fp32_fma:
      break;
  }
  return table.f32_fma_probe;
}

}  // namespace

RoofMeasurement measure_compute_roof(ComputeRoof roof, int threads, double seconds) {
  const auto& probe = probe_for(roof);
  RoofMeasurement result;
  result.kernel = probe.name;
  result.native = probe.level != IsaLevel::generic || roof == ComputeRoof::fp32_fma;
  threads = std::max(1, threads);

  // Calibrate on one thread to about seconds/3 per timed run, then keep the best of two runs.
  float sink = 0;
  std::uint64_t iterations = 1 << 12;
  for (;;) {
    const auto start = Clock::now();
    probe.fn(iterations, &sink);
    const double t = seconds_since(start);
    if (t > 0.005 || iterations > (std::uint64_t{1} << 40)) {
      iterations =
          static_cast<std::uint64_t>(static_cast<double>(iterations) * (seconds / 3) / std::max(t, 1e-6));
      break;
    }
    iterations *= 4;
  }
  iterations = std::max<std::uint64_t>(iterations, 256);
  std::vector<float> sinks(static_cast<std::size_t>(threads) * 16);
  for (int r = 0; r < 2; ++r) {
    std::uint64_t ops = 0;
    const auto start = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : ops)
    ops += probe.fn(iterations, &sinks[static_cast<std::size_t>(omp_get_thread_num()) * 16]);
    result.gops = std::max(result.gops, static_cast<double>(ops) / seconds_since(start) * 1e-9);
  }
  g_observed = sink + sinks[0];
  return result;
}

ReadBandwidthProbe::ReadBandwidthProbe(int threads) : threads_(std::max(1, threads)) {
  const Runtime& rt = runtime();
  // Four times the last-level cache, at least 256 MiB, and at most 1 GiB: a guest whose hypervisor
  // reports a 480 MiB L3 made 8x of it a 3.9 GB probe (issue 43), where a read stream past a few
  // times the cache a core really reaches measures the same bandwidth.
  std::uint64_t bytes = std::uint64_t{256} << 20;
  if (rt.system.l3_bytes) bytes = std::max<std::uint64_t>(bytes, *rt.system.l3_bytes * 4);
  bytes = std::min<std::uint64_t>(bytes, std::uint64_t{1} << 30);
  if (rt.system.mem_available_bytes)
    bytes = std::min<std::uint64_t>(bytes, *rt.system.mem_available_bytes / 4);
  floats_ = static_cast<std::size_t>(bytes / sizeof(float)) / 64 * 64;
  data_ = static_cast<float*>(std::aligned_alloc(64, floats_ * sizeof(float)));
  if (!data_) return;
  // First touched by the threads that read it, so its pages land on their NUMA nodes.
  parallel_for(floats_, 1 << 16, threads_,
               [&](std::size_t b, std::size_t e) { std::fill(data_ + b, data_ + e, 1.0f); });
}

ReadBandwidthProbe::~ReadBandwidthProbe() { std::free(data_); }

double ReadBandwidthProbe::measure(double seconds, int min_passes) {
  if (!data_) return 0;
  const auto sum = kernels::kernel_table().f32_sum.fn;
  double best = 0;
  const auto budget_start = Clock::now();
  std::vector<float> partial(static_cast<std::size_t>(threads_), 0.0f);
  for (int r = 0; r < 16 && (r < min_passes || seconds_since(budget_start) < seconds); ++r) {
    const auto start = Clock::now();
    parallel_for(floats_, 1 << 16, threads_, [&](std::size_t b, std::size_t e) {
      partial[static_cast<std::size_t>(omp_get_thread_num())] = sum(data_ + b, e - b);
    });
    best = std::max(best, static_cast<double>(floats_ * sizeof(float)) / seconds_since(start) * 1e-9);
  }
  g_observed = partial[0];
  return best;
}

double measure_read_bandwidth(int threads, double seconds) {
  return ReadBandwidthProbe(threads).measure(seconds);
}

MeasuredPeaks measure_peaks(double seconds,
                            const std::function<void(int probe, int probes, const char* name)>& on_probe) {
  const auto probe = [&](int index, const char* name) {
    if (on_probe) on_probe(index, 4, name);
  };
  MeasuredPeaks peaks;
  peaks.threads = compute_threads();
  peaks.fma_kernel = kernels::kernel_table().f32_fma_probe.name;
  peaks.bandwidth_kernel = kernels::kernel_table().f32_sum.name;
  peaks.load_average = one_minute_load_average();
  // One core's roofs, then all threads': the steal of each phase over its own busy threads, and
  // the larger of the two reported.
  const StealMeter one_core(1);
  probe(0, "FMA peak, one core");
  peaks.fp32_gflops_one_core = measure_compute_roof(ComputeRoof::fp32_fma, 1, seconds / 4).gops;
  probe(1, "bandwidth, one core");
  peaks.bandwidth_gbs_one_core = measure_read_bandwidth(1, seconds / 4);
  const auto one_core_steal = one_core.share();
  // Other processes leave no steal: what shows them is the CPU time this process got while all
  // its threads wanted a CPU (the phase's one-thread calibration costs a few per cent of it).
  const StealMeter all_threads(peaks.threads);
  const double cpu_before = process_cpu_seconds();
  const auto wall_before = Clock::now();
  probe(2, "FMA peak, all threads");
  peaks.fp32_gflops_all_cores = measure_compute_roof(ComputeRoof::fp32_fma, peaks.threads, seconds / 4).gops;
  probe(3, "bandwidth, all threads");
  peaks.bandwidth_gbs_all_cores = measure_read_bandwidth(peaks.threads, seconds / 4);
  const double cpu_after = process_cpu_seconds(), wall = seconds_since(wall_before);
  if (cpu_before >= 0 && cpu_after >= 0 && wall > 0)
    peaks.cpu_share = std::clamp((cpu_after - cpu_before) / (wall * peaks.threads), 0.0, 1.0);
  if (const auto all_steal = all_threads.share(); one_core_steal && all_steal)
    peaks.steal_share = std::max(*one_core_steal, *all_steal);
  return peaks;
}

std::string competition_warning(const MeasuredPeaks& peaks) {
  if (!peaks.cpu_share) return {};
  // 80%: below the probes' own single-threaded moments; the steal is the hypervisor's, not another
  // process's, and is reported on its own line.
  const double missing = 1 - *peaks.cpu_share, steal = peaks.steal_share.value_or(0.0);
  if (*peaks.cpu_share >= 0.8 || missing < steal + 0.1) return {};
  char load[48] = "";
  if (peaks.load_average) std::snprintf(load, sizeof load, ", load average %.2f before", *peaks.load_average);
  char text[320];
  std::snprintf(
      text, sizeof text,
      "other processes competed for the CPUs during --measure: the probes ran %.0f%% of %d threads' "
      "time (hypervisor steal %.0f%%%s): the measured roofs read low; measure on an idle machine",
      100 * *peaks.cpu_share, peaks.threads, 100 * steal, load);
  return text;
}

}  // namespace cpudl
