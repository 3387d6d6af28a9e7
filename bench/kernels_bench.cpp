// Google Benchmark suite for the native kernels. Memory-bound kernels report GB/s of useful
// traffic (bytes read + bytes written) and `pct_bw`: that rate over the read bandwidth probed
// just before and after each run, on the same number of threads (src/measure/roof_around.h, with
// the hypervisor's steal beside it). Rates are per wall-clock second (UseRealTime): the main
// thread's CPU time would undercount work spread over the pool.
#include <benchmark/benchmark.h>

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <vector>

#include "dense/conv/winograd_conv.h"
#include "dense/onednn/dense.h"
#include "kernels/dispatch.h"
#include "kernels/int8/int8.h"
#include "llm/gguf/quantize.h"
#include "llm/model/weight_matmul.h"
#include "measure/cache_line_floats.h"
#include "measure/roof_around.h"
#include "runtime/aligned_buffer.h"
#include "runtime/parallel.h"

namespace {

using namespace cpudl::kernels;

constexpr std::size_t kBig = std::size_t{16} << 20;  // 16 Mi floats = 64 MiB per tensor

// Line-aligned, as tensor storage is: the row kernels stream only from an aligned address.
using Floats = cpudl::bench::CacheLineFloats;

using cpudl::bench::RoofAround;  // the roof probed before and after each row, and the steal

// After a benchmark's loop: its roof, with the thread count and the steal (steal_pct: the share of
// the threads' time the hypervisor gave to other guests) put on the row.
double finish(benchmark::State& state, const RoofAround& roof) {
  const auto [value, steal] = roof.finish();
  state.counters["threads"] = roof.threads();
  if (steal) state.counters["steal_pct"] = 100.0 * *steal;
  return value;
}

// The read-bandwidth roof in GB/s, one probe buffer per thread count, allocated on first use.
RoofAround bandwidth_roof(int threads) {
  static std::map<int, std::unique_ptr<cpudl::ReadBandwidthProbe>> probes;
  auto& p = probes[threads];
  if (!p) p = std::make_unique<cpudl::ReadBandwidthProbe>(threads);
  return RoofAround([probe = p.get()] { return probe->measure(0.05, 1); }, threads);
}
RoofAround compute_roof(cpudl::ComputeRoof roof, int threads) {
  return cpudl::bench::compute_roof_around(roof, threads, 0.1);
}

void report(benchmark::State& state, const char* kernel, std::size_t bytes_per_call, const RoofAround& roof) {
  const double gbs = finish(state, roof);
  state.SetLabel(kernel);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes_per_call));
  state.counters["pct_bw"] =
      benchmark::Counter(static_cast<double>(state.iterations() * bytes_per_call) / (gbs * 1e9) * 100.0,
                         benchmark::Counter::kIsRate);
}

int threads_arg(const benchmark::State& state) {
  return state.range(1) == 0 ? cpudl::runtime().threads.threads : static_cast<int>(state.range(1));
}

// What a kernel's first input holds. Most kernels take the same time on any value; GELU, its
// derivative and tanh do not: vectors with every lane in |x| < 4 read them off short-range tables
// (math.inl), so they run on activations as a network makes them (normal: N(0, 1), seeded) and on
// the case where every vector takes the general path (wide: uniform over [-12, 12]).
enum class Inputs { constant, normal, wide };

void fill(Floats& x, Inputs inputs, float constant) {
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = inputs == Inputs::constant ? constant : inputs == Inputs::normal ? normal(gen) : wide(gen);
}

void BM_binary(benchmark::State& state, F32BinaryFn (*pick)(), const char* name,
               Inputs inputs = Inputs::constant) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int threads = threads_arg(state);
  Floats a(n), b(n, 2.0f), c(n);
  fill(a, inputs, 1.0f);
  const F32BinaryFn fn = pick();
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(n, 1 << 16, threads, [&](std::size_t lo, std::size_t hi) {
      fn(a.data() + lo, b.data() + lo, c.data() + lo, hi - lo);
    });
    benchmark::ClobberMemory();
  }
  report(state, name, n * 3 * sizeof(float), roof);
}

void BM_unary(benchmark::State& state, F32UnaryFn (*pick)(), const char* name,
              Inputs inputs = Inputs::constant) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int threads = threads_arg(state);
  Floats x(n), y(n);
  fill(x, inputs, 0.5f);
  const F32UnaryFn fn = pick();
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(n, 1 << 16, threads,
                        [&](std::size_t lo, std::size_t hi) { fn(x.data() + lo, y.data() + lo, hi - lo); });
    benchmark::ClobberMemory();
  }
  report(state, name, n * 2 * sizeof(float), roof);
}

// A reduction (sum, max, argmax) of one 64 MiB input split over the threads, one result each.
template <class Fn>
void BM_reduce(benchmark::State& state, const KernelVariant<Fn>& (*pick)()) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int threads = threads_arg(state);
  Floats x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1021);
  const auto& k = pick();
  std::vector<decltype(k.fn(nullptr, 0))> partial(64);
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(n, 1 << 16, threads, [&](std::size_t lo, std::size_t hi) {
      partial[static_cast<std::size_t>(omp_get_thread_num())] = k.fn(x.data() + lo, hi - lo);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  report(state, k.name, n * sizeof(float), roof);
}

const KernelVariant<F32ReduceFn>& sum_kernel() { return kernel_table().f32_sum; }
const KernelVariant<F32ReduceFn>& max_kernel() { return kernel_table().f32_max; }
const KernelVariant<F32ArgmaxFn>& argmax_kernel() { return kernel_table().f32_argmax; }

void BM_adam(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int threads = threads_arg(state);
  Floats w(n, 0.1f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  const auto& k = kernel_table().f32_adam_step;
  std::int64_t step = 0;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    const cpudl::kernels::AdamParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, false, ++step};
    cpudl::parallel_for(n, 1 << 16, threads, [&](std::size_t lo, std::size_t hi) {
      k.fn(w.data() + lo, g.data() + lo, m.data() + lo, v.data() + lo, hi - lo, p);
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, n * 7 * sizeof(float), roof);  // reads w, g, m, v; writes w, m, v
}

// SGD with momentum and weight decay (the branch of PyTorch's step that touches most memory).
void BM_sgd(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int threads = threads_arg(state);
  Floats w(n, 0.1f), g(n, 0.01f), buf(n, 0.0f);
  const auto& k = kernel_table().f32_sgd_step;
  bool first = true;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    const cpudl::kernels::SgdParams p{1e-2f, 0.9f, 0.0f, 1e-4f, false, first};
    first = false;
    cpudl::parallel_for(n, 1 << 16, threads, [&](std::size_t lo, std::size_t hi) {
      k.fn(w.data() + lo, g.data() + lo, buf.data() + lo, hi - lo, p);
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, n * 5 * sizeof(float), roof);  // reads w, g, buf; writes w, buf
}

// Row-wise softmax or log-softmax over rows of 1000 columns (ImageNet's classes).
void BM_rowwise(benchmark::State& state, const KernelVariant<F32RowwiseFn>& (*pick)()) {
  const auto& k = pick();
  const std::size_t rows = static_cast<std::size_t>(state.range(0)) / 1000, cols = 1000;
  const int threads = threads_arg(state);
  Floats x(rows * cols, 0.5f), y(rows * cols);
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(rows, 16, threads, [&](std::size_t lo, std::size_t hi) {
      k.fn(x.data() + lo * cols, y.data() + lo * cols, hi - lo, cols, cols, cols);
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, rows * cols * 2 * sizeof(float), roof);
}

// Layer norm over rows of 768 (BERT-base's hidden size), with gamma and beta: the forward reads
// x and writes y (mean and rstd are 1/384 of that); the backward reads x and dy and writes dx,
// adding into each thread's own dgamma/dbeta as ops/layer_norm does.
void BM_layer_norm_forward(benchmark::State& state) {
  const std::size_t cols = 768, rows = static_cast<std::size_t>(state.range(0)) / cols;
  const int threads = threads_arg(state);
  Floats x(rows * cols), y(rows * cols), gamma(cols, 1.5f), beta(cols, 0.25f), mean(rows), rstd(rows);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.01f;
  const auto& k = kernel_table().f32_layer_norm_forward;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(rows, 16, threads, [&](std::size_t lo, std::size_t hi) {
      k.fn(x.data() + lo * cols, gamma.data(), beta.data(), y.data() + lo * cols, mean.data() + lo,
           rstd.data() + lo, hi - lo, cols, 1e-5f);
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, rows * cols * 2 * sizeof(float), roof);
}

void BM_layer_norm_backward(benchmark::State& state) {
  const std::size_t cols = 768, rows = static_cast<std::size_t>(state.range(0)) / cols;
  const int threads = threads_arg(state);
  Floats x(rows * cols), dy(rows * cols, 0.5f), dx(rows * cols), gamma(cols, 1.5f);
  Floats mean(rows, 0.5f), rstd(rows, 2.0f), dgamma(64 * cols), dbeta(64 * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.01f;
  const auto& k = kernel_table().f32_layer_norm_backward;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(rows, 16, threads, [&](std::size_t lo, std::size_t hi) {
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      k.fn(x.data() + lo * cols, dy.data() + lo * cols, gamma.data(), mean.data() + lo, rstd.data() + lo,
           dx.data() + lo * cols, dgamma.data() + t * cols, dbeta.data() + t * cols, hi - lo, cols);
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, rows * cols * 3 * sizeof(float), roof);
}

// Cross-entropy with its logits gradient over rows of 1000 classes: reads the logits, writes
// dlogits (labels and losses are 1/1000 of that).
void BM_cross_entropy(benchmark::State& state) {
  const std::size_t classes = 1000, rows = static_cast<std::size_t>(state.range(0)) / classes;
  // Each thread's scratch row on lines of its own: rows of 1000 floats packed end to end shared
  // a line between threads, written and read back on every row (2 threads: 55-65% of the
  // bandwidth against softmax's 81-84%).
  const std::size_t scratch_stride = (classes + 15) / 16 * 16;
  const int threads = threads_arg(state);
  Floats logits(rows * classes), dlogits(rows * classes), loss(rows), scratch(64 * scratch_stride);
  std::vector<std::int32_t> labels(rows);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 89) * 0.05f;
  for (std::size_t r = 0; r < rows; ++r) labels[r] = static_cast<std::int32_t>((r * 7) % classes);
  const auto& k = kernel_table().f32_cross_entropy;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(rows, 16, threads, [&](std::size_t lo, std::size_t hi) {
      k.fn({logits.data() + lo * classes, labels.data() + lo, hi - lo, classes, classes, 0.1f,
            loss.data() + lo, dlogits.data() + lo * classes, classes,
            scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * scratch_stride});
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, rows * classes * 2 * sizeof(float), roof);
}

const KernelVariant<F32RowwiseFn>& softmax_kernel() { return kernel_table().f32_softmax; }
const KernelVariant<F32RowwiseFn>& log_softmax_kernel() { return kernel_table().f32_log_softmax; }

#define PICK(kernel) [] { return kernel_table().kernel.fn; }, #kernel

// LLM generation: one token through a weight matrix of 4096 columns in a GGUF type (128 MiB, or
// state.range(0) KiB), the rows split over the threads as llm::weight_matmul does; `repack`: with
// the panels a model makes at load (repack_at_load: Q4_0's and Q4_K's generation panels on VNNI
// CPUs).
// Reports GB/s of weights read and pct_bw: generation is bound by that stream. A matrix that
// stays in L2 (the 512 KiB rows) shows what the kernel's instructions allow instead.
void BM_weight_matvec(benchmark::State& state, cpudl::GgmlType type, const char* name, bool repack = false) {
  const int threads = threads_arg(state);
  const std::size_t cols = 4096, row_bytes = cpudl::llm::row_bytes(type, cols);
  const std::size_t bytes =
      state.range(0) == 0 ? std::size_t{128} << 20 : static_cast<std::size_t>(state.range(0)) << 10;
  const std::size_t rows = bytes / row_bytes / 16 * 16;
  std::vector<float> values(cols);
  for (std::size_t i = 0; i < cols; ++i) values[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  std::vector<std::uint8_t> w(rows * row_bytes);
  cpudl::llm::quantize_row(type, values.data(), w.data(), cols);
  for (std::size_t r = 1; r < rows; ++r) std::copy_n(w.data(), row_bytes, w.data() + r * row_bytes);
  cpudl::llm::WeightMatrix matrix{name, type, w.data(), rows, cols, row_bytes};
  if (repack) cpudl::llm::repack_at_load(matrix, threads);
  cpudl::llm::MatmulScratch scratch;
  std::vector<float> y(rows);
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::llm::weight_matmul(matrix, values.data(), 1, cols, y.data(), rows, scratch, threads);
    benchmark::ClobberMemory();
  }
  report(state, name, rows * row_bytes, roof);
}

// The dynamic int8 product (u8s8_gemm) on an MLP layer's shape, M x 1024 x 1024, the columns
// split over the threads as the runtime's fused op does. Compute-bound at batch 64: reports
// GOP/s and pct_int8_roof, over the int8_dot roof probed around the loop on as many threads.
void BM_u8s8_gemm(benchmark::State& state, bool seven_bit) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const int threads = threads_arg(state);
  const std::size_t k = 1024, n = 1024;
  std::vector<std::uint8_t> a(m * k);
  std::vector<std::int8_t> b(k * n), shifted(m * k);
  std::vector<std::uint8_t> raw(m * k), magnitude(m * k);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i * 31 % 256);
  // Weights over 8 bits, or 7 (--reduce-range), which takes the kernel's shorter path.
  const int levels = seven_bit ? 128 : 255, lowest = seven_bit ? -64 : -127;
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::int8_t>(static_cast<int>(i * 17 % static_cast<std::size_t>(levels)) + lowest);
  std::vector<std::int8_t> packed(u8s8_packed_bytes(k, n) + 32);
  auto* aligned =
      reinterpret_cast<std::int8_t*>((reinterpret_cast<std::uintptr_t>(packed.data()) + 31) / 32 * 32);
  std::vector<std::int32_t> sums(n);
  const bool seven = pack_u8s8_weights(b.data(), n, k, n, aligned, sums.data()) == U8S8WeightRange::seven_bit;
  prepare_u8s8_rows(a.data(), m, k, k, raw.data(), shifted.data(), magnitude.data(), k);
  std::vector<float> scale(n, 0.01f), c(m * n);
  U8S8GemmArgs g{raw.data(), shifted.data(), magnitude.data(), k,    m,       k,     3,        0.02f, aligned,
                 seven,      sums.data(),    scale.data(),     true, nullptr, false, c.data(), n,     0,
                 n};
  const U8S8GemmFn gemm = kernel_table().u8s8_gemm.fn;
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::int8_dot, threads);
  for (auto _ : state) {
    cpudl::parallel_for(n / 16, 1, threads, [&](std::size_t begin, std::size_t end) {
      U8S8GemmArgs part = g;
      part.n_begin = begin * 16;
      part.n_end = end * 16;
      gemm(part);
    });
    benchmark::ClobberMemory();
  }
  const double gops = finish(state, roof);
  state.SetLabel(kernel_table().u8s8_gemm.name);
  const double ops = 2.0 * static_cast<double>(m * k * n);
  state.counters["GOPs"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * ops / 1e9, benchmark::Counter::kIsRate);
  state.counters["pct_int8_roof"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * ops / (gops * 1e9) * 100.0, benchmark::Counter::kIsRate);
}

// LeNet-5's first pooling at batch 256 (6 channels, 28x28 -> 14x14, channels-last), images split
// over the threads as the op does; GB/s of input read + output and argmax written.
void BM_max_pool_nhwc(benchmark::State& state) {
  const int threads = threads_arg(state);
  const auto channels = static_cast<std::size_t>(state.range(0));
  const std::size_t batch = 256;
  const PoolWindow w{channels, 28, 28, 14, 14, 2, 2, 2, 2, 0, 0};
  const std::size_t in_image = 28 * 28 * channels, out_image = 14 * 14 * channels;
  std::vector<float> x(batch * in_image), y(batch * out_image);
  std::vector<std::uint8_t> arg(batch * out_image);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000);
  const MaxPoolNhwcFn fn = kernel_table().f32_max_pool_nhwc.fn;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(batch, 1, threads, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t n = lo; n < hi; ++n)
        fn(w, x.data() + n * in_image, y.data() + n * out_image, arg.data() + n * out_image);
    });
    benchmark::ClobberMemory();
  }
  report(state, kernel_table().f32_max_pool_nhwc.name, batch * (in_image * 4 + out_image * 5), roof);
}

// GFLOP/s (2 x multiply-adds) and % of the fp32 FMA roof measured on as many threads.
void report_flops(benchmark::State& state, const char* kernel, double flops_per_iteration,
                  const RoofAround& roof) {
  const double roof_gflops = finish(state, roof);
  const double gflop = static_cast<double>(state.iterations()) * flops_per_iteration / 1e9;
  state.SetLabel(kernel);
  state.counters["GFLOPs"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  state.counters["pct_fp32_roof"] =
      benchmark::Counter(gflop / roof_gflops * 100, benchmark::Counter::kIsRate);
}

// The SGEMM microkernel's own ceiling: one tile's A and B slivers (k = 256) resident in L1, the
// same C tile accumulated call after call, one thread. Whatever a GEMM driver adds (packing, L2
// and L3 streams, edges) comes on top of the gap between this and the FMA roof: on this shared VM
// it measured 88-96% from run to run, which is why `bench gemm` cannot reach 90% of the roof.
void BM_gemm_microkernel_in_l1(benchmark::State& state) {
  const auto& tile = kernel_table().f32_gemm_tile;
  constexpr std::int64_t k = 256;
  cpudl::AlignedBuffer a, b, c;
  float* ap = a.get(static_cast<std::size_t>(tile.fn.mr * k));
  float* bp = b.get(static_cast<std::size_t>(tile.fn.nr * k));
  float* cp = c.get(static_cast<std::size_t>(tile.fn.mr * tile.fn.nr));
  std::fill(ap, ap + tile.fn.mr * k, 1e-3f);
  std::fill(bp, bp + tile.fn.nr * k, 1e-3f);
  std::fill(cp, cp + tile.fn.mr * tile.fn.nr, 0.0f);
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::fp32_fma, 1);
  for (auto _ : state) {
    const cpudl::kernels::GemmTileArgs args{k, ap, bp, cp, tile.fn.nr, tile.fn.mr, tile.fn.nr, true};
    for (int i = 0; i < 64; ++i) tile.fn.fn(args);
    benchmark::ClobberMemory();
  }
  report_flops(state, tile.name, 64.0 * 2.0 * static_cast<double>(tile.fn.mr * tile.fn.nr * k), roof);
}

// ResNet-18's stride-1 3x3 layer of `channels` channels (56x56 at 64 ... 7x7 at 512), batch 16, as
// oneDNN's direct convolution sees it in `layout`: the peer the Winograd benchmarks compare with.
cpudl::onednn::ConvShape resnet_3x3_layer(std::int64_t channels, cpudl::onednn::ActivationLayout layout) {
  cpudl::onednn::ConvShape s;
  s.batch = 16, s.in_channels = s.out_channels = channels, s.height = s.width = 56 * 64 / channels;
  s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1;
  s.layout = layout;
  return s;
}

// The Winograd benchmarks' arguments {channels, threads}: each ResNet-18 3x3 width on one thread,
// the widest and narrowest on all.
void resnet_3x3_args(benchmark::internal::Benchmark* b) {
  for (const std::int64_t channels : {64, 128, 256, 512}) b->Args({channels, 1});
  b->Args({64, 0})->Args({512, 0});
}

// theirs' time over ours, each the best of 3 calls alternating in this process (`x_<peer>`).
template <class Theirs, class Ours>
double best_of_3_ratio(Theirs&& theirs, Ours&& ours) {
  auto time_once = [](auto&& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double t = 1e30, o = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    t = std::min(t, time_once(theirs));
    o = std::min(o, time_once(ours));
  }
  return t / o;
}

// ResNet-18's stride-1 3x3 layers (channels x channels at 56/28/14/7 pixels, batch 16) through
// the Winograd convolution of the inference runtime, blocked layout, bias + ReLU fused. GFLOP/s
// count the direct convolution's multiply-adds (what the layer computes), so % of the roof can
// pass 100; `x_onednn` is oneDNN's direct convolution time on the same shape, measured in the
// same process (best of 3), over this one.
void BM_winograd_conv(benchmark::State& state) {
  const int threads = threads_arg(state);
  const auto direct = resnet_3x3_layer(state.range(0), cpudl::onednn::ActivationLayout::blocked);
  const std::int64_t channels = direct.in_channels, size = direct.height;
  const cpudl::conv::WinogradConvShape shape{
      direct.batch, channels, size, size, channels, 1, cpudl::onednn::blocked_layout_channels()};
  const auto elements = static_cast<std::size_t>(direct.batch * channels * size * size);
  std::vector<float> x(elements, 0.5f), y(elements), bias(static_cast<std::size_t>(channels), 0.1f);
  std::vector<float> w(static_cast<std::size_t>(channels * channels * 9), 0.01f);
  const cpudl::conv::WinogradConv conv(shape, w.data());
  const cpudl::ThreadScope scope(threads);  // ours and oneDNN's, for the comparison below
  auto ours = [&] { conv.forward(x.data(), bias.data(), nullptr, 0.0f, INFINITY, y.data()); };
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::fp32_fma, threads);
  for (auto _ : state) {
    ours();
    benchmark::ClobberMemory();
  }
  const double ratio = best_of_3_ratio(
      [&] {
        cpudl::onednn::conv2d_forward(direct, x.data(), w.data(), 1, bias.data(), y.data(),
                                      {cpudl::onednn::Activation::relu, nullptr});
      },
      ours);
  report_flops(state, cpudl::kernels::kernel_table().f32_winograd_gemm.name, direct.flops(), roof);
  state.counters["x_onednn"] = ratio;
}

// Training's Winograd weight gradient on ResNet-18's stride-1 3x3 layers (channels x channels at
// 56/28/14/7 pixels, batch 16, channels-last): GFLOP/s at the direct convolution's count and
// `x_onednn`, oneDNN's NHWC backward-weights time on the same shape in the same process (best of
// 3) over this one.
void BM_winograd_backward_weights(benchmark::State& state) {
  const int threads = threads_arg(state);
  const auto direct = resnet_3x3_layer(state.range(0), cpudl::onednn::ActivationLayout::nhwc);
  const std::int64_t channels = direct.in_channels, size = direct.height;
  const cpudl::conv::WinogradConvShape shape{direct.batch, channels, size, size, channels, 1, 0, 4};
  const auto elements = static_cast<std::size_t>(direct.batch * channels * size * size);
  std::vector<float> x(elements, 0.5f), dy(elements, 0.25f),
      dw(static_cast<std::size_t>(channels * channels * 9));
  const cpudl::ThreadScope scope(threads);  // ours and oneDNN's, for the comparison below
  auto ours = [&] { cpudl::conv::winograd_backward_weights(shape, x.data(), dy.data(), dw.data(), nullptr); };
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::fp32_fma, threads);
  for (auto _ : state) {
    ours();
    benchmark::ClobberMemory();
  }
  const double ratio = best_of_3_ratio(
      [&] { cpudl::onednn::conv2d_backward_weights(direct, x.data(), dy.data(), dw.data(), nullptr); }, ours);
  report_flops(state, kernel_table().f32_winograd_gemm_weights.name, direct.flops(), roof);
  state.counters["x_onednn"] = ratio;
}

// The Winograd weight transform as training runs it on every call (F(4x4): U is 4x the 3x3
// weights), over ResNet-18's channel counts, k panels split over the threads: bytes are the
// weights read and U written, against the read bandwidth. Arg 0: channels (C = K).
void BM_winograd_weights(benchmark::State& state) {
  const int threads = threads_arg(state);
  const std::int64_t channels = state.range(0);
  const cpudl::conv::WinogradConvShape shape{16, channels, 56, 56, channels, 1, 0, 4};
  std::vector<float> w(static_cast<std::size_t>(channels * channels * 9), 0.01f);
  cpudl::AlignedBuffer storage;
  float* u = storage.get(cpudl::conv::WinogradConv::transformed_floats(shape));
  const RoofAround roof = bandwidth_roof(threads);
  const cpudl::ThreadScope scope(threads);
  for (auto _ : state) {
    const cpudl::conv::WinogradConv conv(shape, w.data(), cpudl::conv::WinogradPass::forward, u);
    benchmark::DoNotOptimize(u);
    benchmark::ClobberMemory();
  }
  report(state, kernel_table().f32_winograd_weights_4x3.name,
         (w.size() + cpudl::conv::WinogradConv::transformed_floats(shape)) * sizeof(float), roof);
}

// SimpleCNN's first-layer weight gradient at batch 256 (1 -> 32 channels, 3x3, 28x28), images split
// over the threads as the op does; GFLOP/s (2 x multiply-adds) and % of the fp32 FMA roof.
void BM_conv_backward_weights_nhwc(benchmark::State& state) {
  const int threads = threads_arg(state);
  const std::size_t batch = 256, oc = 32;
  const ConvWindow w{1, 28, 28, oc, 26, 26, 3, 3, 1, 1, 0, 0, 1, 1};
  std::vector<float> x(batch * 28 * 28, 0.5f), dy(batch * 26 * 26 * oc, 0.25f);
  std::vector<float> dw(static_cast<std::size_t>(threads) * 10 * oc, 0.0f);
  const ConvBackwardWeightsFn fn = kernel_table().f32_conv_backward_weights_nhwc.fn;
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::fp32_fma, threads);
  for (auto _ : state) {
    cpudl::parallel_for(static_cast<std::size_t>(threads), 1, threads, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t part = lo; part < hi; ++part)
        for (std::size_t n = batch * part / threads; n < batch * (part + 1) / threads; ++n)
          fn(w, x.data() + n * 28 * 28, dy.data() + n * 26 * 26 * oc, dw.data() + part * 10 * oc,
             dw.data() + part * 10 * oc + 9 * oc);
    });
    benchmark::ClobberMemory();
  }
  report_flops(state, kernel_table().f32_conv_backward_weights_nhwc.name, 2.0 * batch * 26 * 26 * oc * 9,
               roof);
}

// SimpleCNN's first layer on the planar kernels (1 -> 32 channels, 3x3, 28x28 images padded to
// rows of 34), forward with the fused ReLU and the masked weight gradient. Args: {batch,
// threads}: 256 streams the activations through memory as training does, 4 keeps them in cache
// (the arithmetic alone).
struct SimpleCnnPlanes {
  static constexpr std::size_t oc = 32, plane = 26 * 26, x_ld = 34, x_plane = 28 * 34;
  explicit SimpleCnnPlanes(std::size_t images) : batch(images) {}
  std::size_t batch;
  ConvPlanes p{1, oc, 26, 26, 3, 3, x_ld, x_plane};
  std::vector<float> x = std::vector<float>(batch * x_plane, 0.5f), w = std::vector<float>(9 * oc, 0.1f),
                     bias = std::vector<float>(oc, 0.0f), y = std::vector<float>(batch * oc * plane, 0.25f),
                     dy = std::vector<float>(batch * oc * plane, 0.25f);
  double flops() const { return 2.0 * static_cast<double>(batch * plane * oc * 9); }
};

void BM_conv_forward_planes(benchmark::State& state) {
  const int threads = threads_arg(state);
  const SimpleCnnPlanes c(static_cast<std::size_t>(state.range(0)));
  std::vector<float> y = c.y;
  const ConvForwardPlanesFn fn = kernel_table().f32_conv_forward_planes.fn;
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::fp32_fma, threads);
  for (auto _ : state) {
    cpudl::parallel_for(c.batch, 1, threads, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t n = lo; n < hi; ++n)
        fn(c.p, c.x.data() + n * c.x_plane, c.w.data(), c.bias.data(), true, y.data() + n * c.oc * c.plane);
    });
    benchmark::ClobberMemory();
  }
  report_flops(state, kernel_table().f32_conv_forward_planes.name, c.flops(), roof);
}

void BM_conv_backward_weights_planes(benchmark::State& state) {
  const int threads = threads_arg(state);
  const SimpleCnnPlanes c(static_cast<std::size_t>(state.range(0)));
  const auto parts = static_cast<std::size_t>(threads);
  std::vector<float> dw(parts * 10 * c.oc, 0.0f);
  const ConvBackwardWeightsPlanesFn fn = kernel_table().f32_conv_backward_weights_planes.fn;
  const RoofAround roof = compute_roof(cpudl::ComputeRoof::fp32_fma, threads);
  for (auto _ : state) {
    cpudl::parallel_for(parts, 1, threads, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t part = lo; part < hi; ++part)
        for (std::size_t n = c.batch * part / parts; n < c.batch * (part + 1) / parts; ++n)
          fn(c.p, c.x.data() + n * c.x_plane, c.dy.data() + n * c.oc * c.plane,
             c.y.data() + n * c.oc * c.plane, dw.data() + part * 10 * c.oc,
             dw.data() + part * 10 * c.oc + 9 * c.oc);
    });
    benchmark::ClobberMemory();
  }
  report_flops(state, kernel_table().f32_conv_backward_weights_planes.name, c.flops(), roof);
}

// SimpleCNN's classifier (21632 -> 10) at batch 256 on the narrow kernels, single-threaded
// calls split as the op splits them; GB/s of the activation (read, or written for the data
// gradient) against the measured bandwidth. Arg 0: 0 forward, 1 data gradient, 2 weight gradient.
void BM_narrow_linear(benchmark::State& state) {
  const int threads = threads_arg(state);
  const std::size_t m = 256, k = 21632, n = 10;
  // 64-byte aligned rows, as tensors have them (a std::vector's 16-byte alignment splits every
  // 512-bit load across two cache lines).
  cpudl::AlignedBuffer xb, wb, dxb, dwb;
  float *x = xb.get(m * k), *w = wb.get(n * k), *dx = dxb.get(m * k), *dw = dwb.get(n * k);
  std::fill(x, x + m * k, 0.5f);
  std::fill(w, w + n * k, 0.01f);
  std::fill(dw, dw + n * k, 0.0f);
  std::vector<float> y(m * n), dy(m * n, 0.25f);
  const auto& table = kernel_table();
  const int which = static_cast<int>(state.range(0));
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    if (which == 0) {
      cpudl::parallel_for(m, 3, threads, [&](std::size_t i0, std::size_t i1) {
        table.f32_narrow_linear_forward.fn(x + i0 * k, w, y.data() + i0 * n, i1 - i0, k, n, k);
      });
    } else if (which == 1) {
      cpudl::parallel_for(m, 4, threads, [&](std::size_t i0, std::size_t i1) {
        table.f32_narrow_linear_backward_data.fn(dy.data() + i0 * n, w, dx + i0 * k, i1 - i0, k, n, k);
      });
    } else {
      cpudl::parallel_for(k / 16, 16, threads, [&](std::size_t l0, std::size_t l1) {
        table.f32_narrow_linear_backward_weights.fn(x + l0 * 16, dy.data(), dw + l0 * 16, m, (l1 - l0) * 16,
                                                    n, k);
      });
    }
    benchmark::ClobberMemory();
  }
  const char* names[] = {table.f32_narrow_linear_forward.name, table.f32_narrow_linear_backward_data.name,
                         table.f32_narrow_linear_backward_weights.name};
  report(state, names[which], m * k * sizeof(float), roof);
}

// NCHW -> NHWC of SimpleCNN's activation at batch 256 ([32 x 676] per image), as
// copy_between_channel_layouts splits it.
void BM_transpose(benchmark::State& state) {
  const int threads = threads_arg(state);
  const std::size_t batch = 256, rows = 32, cols = 676;
  std::vector<float> a(batch * rows * cols, 1.0f), b(a.size());
  const F32TransposeFn fn = kernel_table().f32_transpose.fn;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(batch, 1, threads, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t n = lo; n < hi; ++n)
        fn(a.data() + n * rows * cols, rows, cols, cols, b.data() + n * rows * cols, rows);
    });
    benchmark::ClobberMemory();
  }
  report(state, kernel_table().f32_transpose.name, a.size() * 2 * sizeof(float), roof);
}

// RMSNorm over rows of 4096 (a 7B model's hidden size), kBig floats in all; GB/s (read x and
// the weights, write y) against the bandwidth.
void BM_rms_norm(benchmark::State& state) {
  const int threads = threads_arg(state);
  const std::size_t n = 4096, rows = static_cast<std::size_t>(state.range(0)) / n;
  Floats x(rows * n, 0.5f), w(n, 1.0f), y(rows * n);
  const auto& k = kernel_table().f32_rms_norm;
  const RoofAround roof = bandwidth_roof(threads);
  for (auto _ : state) {
    cpudl::parallel_for(rows, 1, threads, [&](std::size_t r0, std::size_t r1) {
      k.fn(x.data() + r0 * n, w.data(), y.data() + r0 * n, r1 - r0, n, 1e-5f);
    });
    benchmark::ClobberMemory();
  }
  report(state, k.name, rows * n * 2 * sizeof(float), roof);
}

// Args: {elements, threads (0 = the pool's default)}.
void big_one_and_all_threads(benchmark::internal::Benchmark* b) {
  b->Args({kBig, 1})->Args({kBig, 0})->UseRealTime();
}
BENCHMARK_CAPTURE(BM_binary, add, PICK(f32_add))
    ->Args({kBig, 1})
    ->Args({kBig, 0})
    ->Args({1 << 16, 1})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_binary, swiglu, PICK(f32_swiglu))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, relu_backward, PICK(f32_relu_backward))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, gelu_backward, PICK(f32_gelu_backward), Inputs::normal)
    ->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, gelu_backward_wide, PICK(f32_gelu_backward), Inputs::wide)
    ->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, sub, PICK(f32_sub))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, mul, PICK(f32_mul))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, div, PICK(f32_div))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, add_relu, PICK(f32_add_relu))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, sigmoid_backward, PICK(f32_sigmoid_backward))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_binary, tanh_backward, PICK(f32_tanh_backward))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, sigmoid, PICK(f32_sigmoid))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, tanh, PICK(f32_tanh), Inputs::normal)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, tanh_wide, PICK(f32_tanh), Inputs::wide)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, log, PICK(f32_log))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_reduce, max, max_kernel)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_reduce, argmax, argmax_kernel)->Apply(big_one_and_all_threads);
BENCHMARK(BM_layer_norm_forward)->Apply(big_one_and_all_threads);
BENCHMARK(BM_layer_norm_backward)->Apply(big_one_and_all_threads);
BENCHMARK(BM_cross_entropy)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, relu, PICK(f32_relu))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, gelu, PICK(f32_gelu), Inputs::normal)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, gelu_wide, PICK(f32_gelu), Inputs::wide)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_unary, exp, PICK(f32_exp))->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_reduce, sum, sum_kernel)->Apply(big_one_and_all_threads);
BENCHMARK(BM_gemm_microkernel_in_l1)->UseRealTime();
BENCHMARK(BM_rms_norm)->Apply(big_one_and_all_threads);
// Args: {channels, threads}.
BENCHMARK(BM_max_pool_nhwc)->Args({6, 1})->Args({8, 1})->Args({16, 1})->Args({6, 0})->UseRealTime();
BENCHMARK(BM_conv_backward_weights_nhwc)->Args({0, 1})->Args({0, 0})->UseRealTime();
// Args: {channels, threads}.
BENCHMARK(BM_winograd_weights)->Args({128, 1})->Args({256, 1})->Args({512, 1})->Args({512, 0})->UseRealTime();
BENCHMARK(BM_winograd_backward_weights)->Apply(resnet_3x3_args)->UseRealTime();
BENCHMARK(BM_winograd_conv)->Apply(resnet_3x3_args)->UseRealTime();
BENCHMARK(BM_conv_forward_planes)->Args({256, 1})->Args({256, 0})->Args({4, 1})->UseRealTime();
BENCHMARK(BM_conv_backward_weights_planes)->Args({256, 1})->Args({256, 0})->Args({4, 1})->UseRealTime();
BENCHMARK(BM_transpose)->Args({0, 1})->Args({0, 0})->UseRealTime();
BENCHMARK(BM_narrow_linear)
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({2, 0})
    ->UseRealTime();
BENCHMARK(BM_adam)->Apply(big_one_and_all_threads);
BENCHMARK(BM_sgd)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_rowwise, softmax, softmax_kernel)->Apply(big_one_and_all_threads);
BENCHMARK_CAPTURE(BM_rowwise, log_softmax, log_softmax_kernel)->Apply(big_one_and_all_threads);
// Args: {rows M, threads}.
BENCHMARK_CAPTURE(BM_u8s8_gemm, weights_8bit, false)
    ->Args({1, 1})
    ->Args({64, 1})
    ->Args({64, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_u8s8_gemm, weights_7bit, true)
    ->Args({1, 1})
    ->Args({64, 1})
    ->Args({64, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, f32, cpudl::GgmlType::f32, "f32_f32_matmul")
    ->Args({0, 1})
    ->Args({0, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, f16, cpudl::GgmlType::f16, "f16_f32_matmul")
    ->Args({0, 1})
    ->Args({0, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, q8_0, cpudl::GgmlType::q8_0, "q8_0_q8a_matmul")
    ->Args({0, 1})
    ->Args({0, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, q4_0, cpudl::GgmlType::q4_0, "q4_0_q8a_matmul")
    ->Args({0, 1})
    ->Args({0, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, q4_0_panels, cpudl::GgmlType::q4_0, "q4_0 generation panels", true)
    ->Args({0, 1})
    ->Args({0, 0})
    ->Args({512, 1})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, q4_k_panels, cpudl::GgmlType::q4_k, "q4_k generation panels", true)
    ->Args({0, 1})
    ->Args({0, 0})
    ->Args({512, 1})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, q4_k, cpudl::GgmlType::q4_k, "q4_k_q8_k_matmul")
    ->Args({0, 1})
    ->Args({0, 0})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_weight_matvec, q6_k, cpudl::GgmlType::q6_k, "q6_k_q8_k_matmul")
    ->Args({0, 1})
    ->Args({0, 0})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
