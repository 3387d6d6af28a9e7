// Google Benchmark suite for the native kernels: each reports GB/s, to be read against the
// memory bandwidth that `cpudl doctor --measure` measures in the same session.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/dispatch.h"

namespace {

using namespace cpudl::kernels;

template <class Fn>
const KernelVariant<Fn>* variant_at(const std::vector<KernelVariant<Fn>>& variants, int index) {
  const auto& v = variants[static_cast<std::size_t>(index)];
  return v.level <= cpudl::runtime().isa.detected ? &v : nullptr;
}

void BM_f32_add(benchmark::State& state) {
  const auto* v = variant_at(f32_add_variants(), static_cast<int>(state.range(1)));
  if (!v) return state.SkipWithError("variant not supported by this CPU");
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  for (auto _ : state) {
    v->fn(a.data(), b.data(), c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(v->name);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 3 * sizeof(float)));
}

void BM_f32_sum(benchmark::State& state) {
  const auto* v = variant_at(f32_sum_variants(), static_cast<int>(state.range(1)));
  if (!v) return state.SkipWithError("variant not supported by this CPU");
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n, 1.0f);
  for (auto _ : state) benchmark::DoNotOptimize(v->fn(a.data(), n));
  state.SetLabel(v->name);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

// Sizes: in L1, in L2, and 64 MiB (memory-bound); variant index 0 = best, 2 = reference.
BENCHMARK(BM_f32_add)->ArgsProduct({{4096, 65536, 16 << 20}, {0, 1, 2}});
BENCHMARK(BM_f32_sum)->ArgsProduct({{4096, 65536, 16 << 20}, {0, 1, 2}});

}  // namespace

BENCHMARK_MAIN();
