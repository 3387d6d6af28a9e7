// `cpudl bench peak|gemm|conv` (and `model`, in bench_model.cpp): the machine's roofs, and dense compute
// measured against them, each BLAS side by side, on 1..N threads. Text table, or one JSON record per
// measurement.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/blas/blas.h"
#include "dense/conv/conv_list.h"
#include "dense/conv/planar_conv.h"
#include "measure/cache_line_floats.h"
#include "measure/roof_around.h"
#include "measure/timing.h"
#include "measure/workloads.h"

namespace cpudl::cli {
namespace {

using Json = nlohmann::ordered_json;

struct BenchOptions {
  bool json = false;
  std::string threads;  // "1,2"; empty = 1..default threads
  double min_time = 0.25;
  std::string sizes = "256,512,1024,2048";
  std::string backends;  // empty = every available one
  std::string model = "all";
  std::int64_t batch = 0;
};

std::vector<int> thread_counts(const BenchOptions& o) {
  // Each row runs inside a ThreadScope of its count, so nothing started later can undo it.
  std::vector<int> out;
  if (o.threads.empty()) {
    for (int t = 1; t <= compute_threads(); ++t) out.push_back(t);
  } else {
    for (std::int64_t t : parse_int_list(o.threads, "--threads")) {
      check_thread_request(static_cast<int>(std::min<std::int64_t>(t, 1 << 20)), "--threads");
      out.push_back(static_cast<int>(t));
    }
  }
  return out;
}

// Prints each record as it is measured: a JSON line, or a table row. On a terminal, a status
// line under the table names the row being measured (with a bar and ETA when the row count is
// known): rows of some benches take seconds each.
class Report {
 public:
  explicit Report(bool json, const char* bench, std::int64_t rows = 0)
      : json_(json), status_(std::string("bench ") + bench, rows, !json) {}
  void header(const char* title, const char* columns) {
    if (!json_) std::printf("\n%s\n%s\n", title, columns);
    std::fflush(stdout);
  }
  void measuring(const std::string& what) { status_.update(done_, what); }
  void record(const Json& r, const std::string& row) {
    status_.clear();
    ++done_;
    if (json_)
      std::printf("%s\n", r.dump().c_str());
    else
      std::printf("%s\n", row.c_str());
    std::fflush(stdout);
  }

 private:
  bool json_;
  Progress status_;
  std::int64_t done_ = 0;
};

std::string format(const char* fmt, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, fmt, args...);
  return buffer;
}

// A measurement and the fp32 roof around it (bench/roof_around.h: 50 ms probes before and after).
// `steal` is the share of the threads' time the hypervisor took over the row, probes included
// (null where /proc/stat cannot be read).
struct RoofedTiming {
  bench::Timing timing;
  double roof_gflops;
  Json steal;
};
Json steal_percent(const std::optional<double>& share) {
  return share ? Json(100.0 * *share) : Json(nullptr);
}
// The table's steal column: "-" where unknown.
std::string steal_text(const Json& steal) {
  if (steal.is_null()) return "    -";
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%4.0f%%", steal.get<double>());
  return buffer;
}
template <class Fn>
RoofedTiming time_against_roof(Fn&& fn, double min_time, int threads) {
  const bench::RoofAround around = bench::compute_roof_around(ComputeRoof::fp32_fma, threads, 0.05);
  const bench::Timing timing = bench::time_calls(fn, min_time);
  const auto [roof, steal] = around.finish();
  return {timing, roof, steal_percent(steal)};
}

// Uniform in [-1, 1), on a cache line as tensor storage is (bench/cache_line_floats.h says why).
bench::CacheLineFloats random_buffer(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  bench::CacheLineFloats v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

int run_peak(const BenchOptions& o) {
  const std::vector<int> threads = thread_counts(o);  // a bad list fails before anything is printed
  Report report(o.json, "peak", static_cast<std::int64_t>(threads.size()) * 4);
  report.header("Roofs measured on this machine (steal: the share of the threads' time the hypervisor took)",
                "roof                 threads   throughput      steal  kernel");
  const struct {
    ComputeRoof roof;
    const char* name;
  } roofs[] = {{ComputeRoof::fp32_fma, "fp32_fma"},
               {ComputeRoof::bf16_dot, "bf16_dot"},
               {ComputeRoof::int8_dot, "int8_dot"}};
  for (int t : threads) {
    for (const auto& r : roofs) {
      report.measuring(std::string(r.name) + ", " + std::to_string(t) + " threads");
      const StealMeter meter(t);
      const RoofMeasurement m = measure_compute_roof(r.roof, t, o.min_time * 2);
      const Json steal = steal_percent(meter.share());
      Json j = {{"op", std::string("peak_") + r.name},
                {"threads", t},
                {"gops", m.gops},
                {"kernel", m.kernel},
                {"native", m.native},
                {"steal_pct", steal}};
      report.record(j,
                    format("%-20s %7d %9.1f GOP/s   %s  %s%s", r.name, t, m.gops, steal_text(steal).c_str(),
                           m.kernel.c_str(), m.native ? "" : "  (no native instruction: scalar reference)"));
    }
    report.measuring("memory_read, " + std::to_string(t) + " threads");
    const StealMeter meter(t);
    const double gbs = measure_read_bandwidth(t, o.min_time * 2);
    const Json steal = steal_percent(meter.share());
    report.record(Json{{"op", "peak_bandwidth"}, {"threads", t}, {"gbs", gbs}, {"steal_pct", steal}},
                  format("%-20s %7d %9.1f GB/s    %s", "memory_read", t, gbs, steal_text(steal).c_str()));
  }
  return 0;
}

int run_gemm(const BenchOptions& o) {
  const std::vector<int> threads = thread_counts(o);  // bad lists fail before anything is printed
  const auto workloads = bench::gemm_workloads(parse_int_list(o.sizes, "--sizes"));
  (void)
      blas::active_backend();  // a malformed CPUDL_BLAS is a usage error even though rows name their backend
  std::vector<blas::Backend> backends;
  if (o.backends.empty()) {
    for (blas::Backend b : blas::kAllBackends)
      if (blas::available(b)) backends.push_back(b);
  } else {
    std::stringstream in(o.backends);
    for (std::string name; std::getline(in, name, ',');) {
      const blas::Backend b = blas::parse_backend(name, "--backends");
      blas::require(b);
      backends.push_back(b);
    }
  }
  Report report(o.json, "gemm",
                static_cast<std::int64_t>(threads.size() * workloads.size() * backends.size()));
  std::string libraries;
  for (blas::Backend b : backends)
    libraries += "\n  " + std::string(blas::backend_name(b)) + ": " + blas::describe(b);
  report.header(("SGEMM, C = A B, fp32 (median time; % of the fp32 FMA roof probed just before and after "
                 "each row, at the same threads; steal: the share of the threads' time the hypervisor took)" +
                 libraries)
                    .c_str(),
                "backend   threads      m      n      k   ms        GFLOP/s  %peak steal  shape");
  for (int t : threads) {
    const ThreadScope scope(t);
    for (const auto& w : workloads) {
      const auto a = random_buffer(static_cast<std::size_t>(w.m * w.k), 1);
      const auto b = random_buffer(static_cast<std::size_t>(w.k * w.n), 2);
      bench::CacheLineFloats c(static_cast<std::size_t>(w.m * w.n));
      for (blas::Backend backend : backends) {
        auto call = [&] {
          if (backend == blas::Backend::onednn)
            onednn::matmul_onednn(onednn::MatmulShape{1, w.m, w.n, w.k}, a.data(), b.data(), c.data());
          else
            blas::cblas_sgemm(backend, false, false, w.m, w.n, w.k, a.data(), b.data(), c.data(), false, t);
        };
        report.measuring(std::string(blas::backend_name(backend)) + " " + w.label + ", " + std::to_string(t) +
                         " threads");
        const auto [timing, roof, steal] = time_against_roof(call, o.min_time, t);
        const double gflops = 2.0 * static_cast<double>(w.m * w.n * w.k) / timing.median_seconds * 1e-9;
        Json j = {{"op", "gemm"},      {"backend", blas::backend_name(backend)},
                  {"label", w.label},  {"m", w.m},
                  {"n", w.n},          {"k", w.k},
                  {"threads", t},      {"ms", timing.median_seconds * 1e3},
                  {"gflops", gflops},  {"pct_peak", 100.0 * gflops / roof},
                  {"steal_pct", steal}};
        report.record(
            j, format("%-9s %7d %6lld %6lld %6lld %8.3f %9.1f %5.1f%% %s  %s",
                      std::string(blas::backend_name(backend)).c_str(), t, static_cast<long long>(w.m),
                      static_cast<long long>(w.n), static_cast<long long>(w.k), timing.median_seconds * 1e3,
                      gflops, 100.0 * gflops / roof, steal_text(steal).c_str(), w.label.c_str()));
      }
    }
  }
  return 0;
}

int run_conv(const BenchOptions& o) {
  const std::vector<int> threads = thread_counts(o);  // a bad list fails before anything is printed
  const auto workloads = bench::conv_workloads(o.model, o.batch);
  Report report(o.json, "conv");
  report.header(
      "Convolutions on every implementation that can run them (dense/conv/conv_list.h), each pass as "
      "training runs it (channels-last; the input needs a gradient except in a model's first layer) and "
      "the forward pass as the inference runtime does (blocked layout, constant weights prepared once: "
      "marked 'inference'); '*' marks the list's choice. fp32 (median; % of the fp32 roof probed just "
      "before and after each row, at the same threads; Winograd counted at the direct convolution's "
      "FLOPs; the bf16 entries round their operands to bf16 and may pass the fp32 roof; steal: the share of "
      "the threads' time the hypervisor took; each layer with or without bias "
      "as its model defines it: ResNet-18's convolutions have none)",
      "model      layer                     batch threads pass               implementation          ms  "
      "  GFLOP/s  %peak steal");
  for (int t : threads) {
    const ThreadScope scope(t);
    for (const auto& w : workloads) {
      const auto x = random_buffer(
          static_cast<std::size_t>(w.shape.batch * w.shape.in_channels * w.shape.height * w.shape.width), 1);
      const auto wt =
          random_buffer(static_cast<std::size_t>(w.shape.out_channels * w.shape.in_channels / w.shape.groups *
                                                 w.shape.kernel_h * w.shape.kernel_w),
                        2);
      const auto bias = random_buffer(static_cast<std::size_t>(w.shape.out_channels), 3);
      const auto dy = random_buffer(static_cast<std::size_t>(w.shape.batch * w.shape.out_channels *
                                                             w.shape.out_height() * w.shape.out_width()),
                                    4);
      bench::CacheLineFloats y(dy.size()), dx(x.size()), dw(wt.size()), db(bias.size());
      conv::ConvContext training;
      training.input_needs_grad = w.shape.in_channels > conv::kFewInputChannels;
      conv::ConvContext inference;
      inference.constant_weights = true;
      inference.input_needs_grad = false;
      onednn::ConvShape blocked = w.shape;
      blocked.layout = onednn::ActivationLayout::blocked;
      const struct {
        const onednn::ConvShape& shape;
        conv::ConvPass pass;
        const conv::ConvContext& context;
        const char* label;
      } cases[] = {{w.shape, conv::ConvPass::forward, training, "forward"},
                   {w.shape, conv::ConvPass::backward_data, training, "backward_data"},
                   {w.shape, conv::ConvPass::backward_weights, training, "backward_weights"},
                   {blocked, conv::ConvPass::forward, inference, "forward inference"}};
      for (const auto& c : cases) {
        const onednn::ConvShape& s = c.shape;
        // Blocked forward rows only where the inference runtime would run something other than oneDNN.
        const conv::ConvImpl& chosen = conv::choose_conv_impl(s, c.pass, c.context);
        if (&c.context == &inference && chosen.name == "onednn") continue;
        for (const conv::ConvImpl& impl : conv::conv_impls()) {
          // The reference is a correctness tool: its loops would dominate the run.
          if (impl.name == "reference" || !(impl.passes & conv::pass_bit(c.pass)) ||
              !impl.runs(s, c.pass, c.context))
            continue;
          conv::ConvArgs a;
          a.weights = wt.data(), a.weights_version = 1;
          a.bias = w.bias ? bias.data() : nullptr;
          if (c.pass == conv::ConvPass::forward) a.src = x.data(), a.dst = y.data();
          if (c.pass == conv::ConvPass::backward_data) a.src = dy.data(), a.dst = dx.data();
          if (c.pass == conv::ConvPass::backward_weights)
            a.src = x.data(), a.diff_dst = dy.data(), a.dst = dw.data(),
            a.diff_bias = w.bias ? db.data() : nullptr;
          // Inference prepares the weights once per plan (outside the timing); training on every call.
          std::shared_ptr<const conv::ConvPrepared> prepared;
          if (c.context.constant_weights && impl.prepare) prepared = impl.prepare(s, c.pass, wt.data());
          a.prepared = prepared.get();
          report.measuring(w.model + " " + w.layer + " " + c.label + " " + std::string(impl.name) + ", " +
                           std::to_string(t) + " threads");
          const auto [timing, roof, steal] =
              time_against_roof([&] { impl.run(s, c.pass, a); }, o.min_time, t);
          const double gflops = s.flops() / timing.median_seconds * 1e-9;
          const bool is_chosen = &impl == &chosen;
          Json j = {{"op", std::string("conv_") + std::string(conv::pass_name(c.pass))},
                    {"implementation", std::string(impl.name)},
                    {"chosen", is_chosen},
                    {"layout", std::string(conv::layout_name(s.layout))},
                    {"model", w.model},
                    {"layer", w.layer},
                    {"n", s.batch},
                    {"c", s.in_channels},
                    {"h", s.height},
                    {"w", s.width},
                    {"oc", s.out_channels},
                    {"kh", s.kernel_h},
                    {"kw", s.kernel_w},
                    {"stride", s.stride_h},
                    {"pad", s.pad_h},
                    {"groups", s.groups},
                    {"bias", w.bias},
                    {"threads", t},
                    {"ms", timing.median_seconds * 1e3},
                    {"gflops", gflops},
                    {"pct_peak", 100.0 * gflops / roof},
                    {"steal_pct", steal}};
          const std::string name = std::string(is_chosen ? "*" : " ") + std::string(impl.name);
          report.record(j, format("%-10s %-25s %5lld %7d %-18s %-20s %8.3f %9.1f %5.1f%% %s", w.model.c_str(),
                                  w.layer.c_str(), static_cast<long long>(s.batch), t, c.label, name.c_str(),
                                  timing.median_seconds * 1e3, gflops, 100.0 * gflops / roof,
                                  steal_text(steal).c_str()));
        }
      }
    }
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  CLI::App* bench =
      app.add_subcommand("bench", "Measure the machine's roofs and cpudl's kernels against them");
  bench->require_subcommand(1, 1);
  auto options = std::make_shared<BenchOptions>();
  auto common = [options](CLI::App* sub) {
    sub->add_flag("--json", options->json, "One JSON object per measurement, one per line");
    sub->add_option("--threads", options->threads, "Comma-separated thread counts (default 1..N)");
    sub->add_option("--min-time", options->min_time, "Seconds to time each measurement (default 0.25)")
        ->check(in_range(0.001, 60.0));
  };
  CLI::App* peak =
      bench->add_subcommand("peak", "fp32 FMA, bf16 and int8 dot-product throughput, memory bandwidth");
  common(peak);
  peak->callback([&action, options] { action = [options] { return run_peak(*options); }; });
  CLI::App* gemm =
      bench->add_subcommand("gemm", "SGEMM: square sizes and real-layer shapes, every BLAS side by side");
  common(gemm);
  gemm->add_option("--sizes", options->sizes, "Square sizes (default 256,512,1024,2048)");
  gemm->add_option("--backends", options->backends,
                   "Comma-separated: " + blas::backend_names(", ") + " (default: every one installed)");
  gemm->callback([&action, options] { action = [options] { return run_gemm(*options); }; });
  CLI::App* conv =
      bench->add_subcommand("conv", "Convolutions of ResNet-18, LeNet-5 and SimpleCNN, forward and backward");
  common(conv);
  conv->add_option("--model", options->model, "resnet18, lenet5, simplecnn or all (default)");
  conv->add_option("--batch", options->batch, "Batch size (default: 16 for resnet18, 256 for MNIST models)")
      ->check(positive_number());
  conv->callback([&action, options] { action = [options] { return run_conv(*options); }; });
  add_bench_model_command(*bench, action);
  add_bench_llm_command(*bench, action);
  add_bench_allreduce_command(*bench, action);
}

}  // namespace cpudl::cli
