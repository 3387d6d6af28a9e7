// What the thread governor costs: one sample of the machine (the files of docs/OPERATIONS.md read
// and parsed) and one policy decision, timed on this machine. The governor takes one sample per
// half second, so `pct_of_one_cpu` is its whole CPU cost beside the work it governs.
#include <benchmark/benchmark.h>

#include "runtime/governor.h"

namespace {

void BM_GovernorSampleAndDecide(benchmark::State& state) {
  cpudl::LoadSampler sampler("/", nullptr);
  cpudl::GovernorPolicy policy(cpudl::GovernorConfig{2});
  for (auto _ : state) {
    auto decision = policy.update(sampler.sample(cpudl::steady_seconds()));
    benchmark::DoNotOptimize(decision);
  }
  // At two samples a second, twice the time of one is the share of a CPU the governor takes.
  // kIsRate divides by the elapsed time and kInvert turns it over: elapsed / (iterations / 200).
  state.counters["pct_of_one_cpu"] =
      benchmark::Counter(static_cast<double>(state.iterations()) / 200.0,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_GovernorSampleAndDecide)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
