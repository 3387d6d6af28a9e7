// What cpudl's oneDNN wrapper costs: onednn::matmul_onednn (cache look-up, pointer
// binding) against the same oneDNN primitive created once and executed directly, in one process.
// The ratio of the two times is the wrapper's overhead.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "dense/onednn/dense.h"
#include "dense/onednn/engine.h"

namespace {

using namespace cpudl;

void BM_matmul_cpudl(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  for (auto _ : state) onednn::matmul_onednn(onednn::MatmulShape{1, n, n, n}, a.data(), b.data(), c.data());
  state.counters["gflops"] = benchmark::Counter(
      2.0 * static_cast<double>(n * n * n) * 1e-9 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_matmul_onednn_direct(benchmark::State& state) {
  const auto n = state.range(0);
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc md({n, n}, dnnl::memory::data_type::f32, tag::ab);
  dnnl::engine& eng = onednn::engine();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), eng);
  const dnnl::matmul prim(pd);
  dnnl::memory ma(md, eng, a.data()), mb(md, eng, b.data()), mc(md, eng, c.data());
  for (auto _ : state) {
    prim.execute(onednn::stream(), {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    onednn::stream().wait();
  }
  state.counters["gflops"] = benchmark::Counter(
      2.0 * static_cast<double>(n * n * n) * 1e-9 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

BENCHMARK(BM_matmul_cpudl)->Arg(16)->Arg(64)->Arg(512)->Arg(1024);
BENCHMARK(BM_matmul_onednn_direct)->Arg(16)->Arg(64)->Arg(512)->Arg(1024);

}  // namespace

BENCHMARK_MAIN();
