// `cpudl run` (an ONNX model on .npy inputs, optionally timed) and `cpudl info` (what a model
// holds and what the optimiser and the memory plan made of it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "cpudl/runtime.h"
#include "infer/detector.h"
#include "io/file_kind.h"

namespace cpudl::cli {
namespace {

// --precision of run and info (InferenceOptions::bf16 and follow_bf16_weights).
void add_precision_option(CLI::App* app, std::string& precision) {
  app->add_option(
         "--precision", precision,
         "auto (default: bf16 for a model whose weights are stored bf16, on a CPU with AMX or "
         "AVX512-BF16; else fp32), fp32, or bf16: convolutions and matrix products in bf16 (f32 sums "
         "and outputs); bf16 is an error on CPUs with neither unit")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
}

void apply_precision(const std::string& precision, InferenceOptions& options) {
  options.bf16 = precision == "bf16";
  options.follow_bf16_weights = precision == "auto";
}

// What a session computes in: "bf16" when its float products were tagged bf16, "int8" when int8
// products run (a quantised model), both joined by "+", else "fp32".
std::string effective_precision(const ModelInfo& info) {
  const bool int8 = info.ops_planned.count("cpudl.Int8Conv") || info.ops_planned.count("cpudl.Int8MatMul");
  const bool bf16 = info.rewrite_counts.count("bf16") > 0;
  return int8 && bf16 ? "int8+bf16" : int8 ? "int8" : bf16 ? "bf16" : "fp32";
}

// --int8-conv of run and info (InferenceOptions::int8_convolutions).
void add_int8_conv_option(CLI::App* app, std::string& int8_conv) {
  app->add_option("--int8-conv", int8_conv,
                  "on (default): a static int8 (QDQ) model's convolutions run on oneDNN's int8 kernels; off: "
                  "float convolutions between the QDQ pairs (to compare)")
      ->check(CLI::IsMember({"on", "off"}));
}

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs, outputs;
  int bench = 0, threads = 0;
  std::string governor;  // --governor; empty: CPUDL_GOVERNOR or on
  std::string bind = "none";
  std::int64_t batch = 0;
  std::string precision = "auto";
  std::string int8_conv = "on";
  std::int64_t max_loop_iterations = InferenceOptions{}.max_loop_iterations;
  bool json = false;
};

// The model's declared shape with free dimensions set: the batch (dim 0) to `batch`, others to 1.
Shape concrete_shape(const ModelValue& v, std::int64_t batch) {
  Shape s = v.shape;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] < 0) s[i] = i == 0 && batch > 0 ? batch : 1;
  if (!s.empty() && batch > 0) s[0] = batch;
  return s;
}

// Repeats (or cuts) the samples of `t` along dim 0 to `batch` rows.
Tensor resize_batch(const Tensor& t, std::int64_t batch) {
  if (t.dim() == 0 || t.size(0) == batch) return t;
  Shape shape = t.shape();
  const std::int64_t rows = shape[0];
  shape[0] = batch;
  Tensor out = Tensor::empty(shape, t.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(t.numel() / rows) * dtype_size(t.dtype());
  for (std::int64_t r = 0; r < batch; ++r)
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(r) * row_bytes,
                static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>(r % rows) * row_bytes,
                row_bytes);
  return out;
}

void print_profile(const InferenceSession& session) {
  auto profile = session.profile();
  std::sort(profile.begin(), profile.end(),
            [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
  double total = 0;
  for (const auto& p : profile) total += p.seconds;
  std::fprintf(stderr, "%-20s %8s %10s %7s %10s %8s\n", "op", "calls", "ms/call", "share", "GFLOP/s",
               "alone");
  for (const auto& p : profile) {
    if (p.calls == 0) continue;
    std::fprintf(stderr, "%-20s %8lld %10.3f %6.1f%% %10.1f %8lld\n", p.op.c_str(),
                 static_cast<long long>(p.calls), 1e3 * p.seconds / static_cast<double>(p.calls),
                 100 * p.seconds / std::max(total, 1e-12), p.flops > 0 ? p.flops / p.seconds / 1e9 : 0.0,
                 static_cast<long long>(p.alone_calls));
  }
}

int run_model(const RunOptions& o) {
  for (const auto& output : o.outputs) {
    io::require_output_is_not_an_input(output, {o.model}, "--output");
    for (const auto& input : o.inputs) io::require_output_is_not_an_input(output, {input}, "--output");
  }
  InferenceOptions options;
  options.int8_convolutions = o.int8_conv == "on";
  options.max_loop_iterations = o.max_loop_iterations;
  apply_precision(o.precision, options);
  const OnnxInput file(o.model);  // a cpudl model runs as its ONNX export
  InferenceSession session(file.path(), options);
  const auto& declared = session.inputs();
  std::vector<Tensor> inputs;
  if (o.inputs.empty()) {
    if (o.bench == 0) throw UsageError("give --input FILE.npy (or --bench N to time on random inputs)");
    Generator gen(0);
    for (const auto& v : declared) {
      if (v.dtype != DType::f32)
        throw UsageError("input '" + v.name + "' is not float: give it with --input");
      inputs.push_back(Tensor::rand(concrete_shape(v, o.batch > 0 ? o.batch : 1), gen));
    }
  } else {
    if (o.inputs.size() != declared.size())
      throw UsageError("the model takes " + std::to_string(declared.size()) + " input(s), " +
                       std::to_string(o.inputs.size()) + " --input given");
    for (const auto& path : o.inputs) {
      Tensor t = io::load_npy(path);
      inputs.push_back(o.batch > 0 ? resize_batch(t, o.batch) : t);
    }
  }
  if (!o.outputs.empty() && o.outputs.size() != session.outputs().size())
    throw UsageError("the model has " + std::to_string(session.outputs().size()) + " output(s), " +
                     std::to_string(o.outputs.size()) + " --output given");

  std::vector<Tensor> results = session.run(inputs);
  nlohmann::ordered_json report;
  if (o.bench > 0) {
    using Clock = std::chrono::steady_clock;
    const std::unique_ptr<Governor> governor = start_governor(o.governor);
    for (int i = 0; i < 3; ++i) session.run(inputs);  // warm-up beyond the first (plan) run
    std::vector<double> ms;
    const auto bench_start = Clock::now();
    Progress progress("run --bench", o.bench, !o.json);
    for (int i = 0; i < o.bench; ++i) {
      const GovernedScope threads(governor.get());  // each run on the count of the moment
      const auto t0 = Clock::now();
      session.run(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      progress.update(i + 1, "runs");
    }
    progress.clear();
    const double wall = std::chrono::duration<double>(Clock::now() - bench_start).count();
    std::sort(ms.begin(), ms.end());
    // Nearest-rank percentiles (the smallest run time at or above that share of the runs).
    const auto percentile = [&](double q) {
      return ms[std::min(
          ms.size() - 1,
          static_cast<std::size_t>(std::max(1.0, std::ceil(q * static_cast<double>(ms.size())))) - 1)];
    };
    const double median = ms[ms.size() / 2], p90 = percentile(0.9), p99 = percentile(0.99);
    const ModelInfo info = session.info([&] {
      std::vector<Shape> shapes;
      for (const auto& t : inputs) shapes.push_back(t.shape());
      return shapes;
    }());
    const std::int64_t batch = inputs.empty() || inputs[0].dim() == 0 ? 1 : inputs[0].size(0);
    report = {{"model", o.model},
              {"median_ms", median},
              {"p90_ms", p90},
              {"p99_ms", p99},
              {"min_ms", ms.front()},
              {"max_ms", ms.back()},
              {"samples_per_second", static_cast<double>(batch) * o.bench / std::max(wall, 1e-9)},
              {"batch", batch},
              {"threads", compute_threads()},
              {"precision", effective_precision(info)},
              {"iterations", o.bench},
              {"gflops", info.flops / (median * 1e-3) / 1e9}};
    if (!o.json)
      std::printf(
          "%s: batch %lld, %d threads, %s: median %.3f ms, p90 %.3f ms, p99 %.3f ms over %d runs; %.1f "
          "samples/s "
          "(%.1f GFLOP/s)\n",
          o.model.c_str(), static_cast<long long>(batch), compute_threads(),
          effective_precision(info).c_str(), median, p90, p99, o.bench,
          static_cast<double>(batch) * o.bench / std::max(wall, 1e-9), info.flops / (median * 1e-3) / 1e9);
  }
  for (std::size_t i = 0; i < o.outputs.size(); ++i) io::save_npy(o.outputs[i], results[i]);
  if (o.json) {
    nlohmann::ordered_json outs = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < results.size(); ++i) {
      nlohmann::ordered_json entry = {{"name", session.outputs()[i].name}, {"shape", results[i].shape()}};
      if (results[i].dtype() == DType::f32 && results[i].numel() <= 4096)
        entry["values"] = results[i].to_vector();
      outs.push_back(entry);
    }
    report["outputs"] = outs;
    std::printf("%s\n", report.dump().c_str());
  } else if (o.bench == 0 && o.outputs.empty()) {
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Tensor& y = results[i];
      std::printf("%s %s", session.outputs()[i].name.c_str(), shape_text(y.shape()).c_str());
      if (y.dtype() == DType::f32 && y.dim() == 2) {  // rows of scores: the top class of each
        std::printf(": argmax per row");
        const std::vector<float> v = y.to_vector();
        for (std::int64_t r = 0; r < y.size(0); ++r) {
          const auto row = v.begin() + r * y.size(1);
          std::printf(" %lld", static_cast<long long>(std::max_element(row, row + y.size(1)) - row));
        }
      }
      std::printf("\n");
    }
  }
  if (op_profiling_enabled()) print_profile(session);
  return 0;
}

struct InfoOptions {
  std::string model;
  std::int64_t batch = 0;  // 0: the model's own first dimension (1 when free)
  std::string precision = "auto";
  std::string int8_conv = "on";
  std::int64_t max_loop_iterations = InferenceOptions{}.max_loop_iterations;
  bool json = false;
};

int run_info(const InfoOptions& o) {
  if (io::file_kind(std::filesystem::path(o.model)) == io::FileKind::gguf)
    return run_llm_info(o.model, o.json);
  InferenceOptions options;
  options.int8_convolutions = o.int8_conv == "on";
  options.max_loop_iterations = o.max_loop_iterations;
  apply_precision(o.precision, options);
  const OnnxInput file(o.model);  // a cpudl model is described as its ONNX export
  if (file.exported())
    std::fprintf(stderr, "cpudl: %s is a cpudl model: described as its ONNX export\n", o.model.c_str());
  InferenceSession session(file.path(), options);
  std::vector<Shape> shapes;
  for (const auto& v : session.inputs()) shapes.push_back(concrete_shape(v, o.batch));
  const ModelInfo info = session.info(shapes);
  const std::int64_t batch = shapes.empty() || shapes[0].empty() ? 1 : shapes[0][0];
  auto value_json = [](const std::vector<ModelValue>& values) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& v : values)
      a.push_back({{"name", v.name}, {"dtype", std::string(dtype_name(v.dtype))}, {"shape", v.shape}});
    return a;
  };
  // A detector: which outputs hold its detections and where its post-processing runs.
  std::string detector;
  try {
    detector = infer::detector_outputs(info.outputs, o.model).summary;
    std::string data_dependent;
    for (const char* op : {"NonZero", "NonMaxSuppression", "If", "Loop", "TopK"})
      if (info.ops_loaded.count(op)) data_dependent += std::string(data_dependent.empty() ? "" : ", ") + op;
    if (!data_dependent.empty())
      detector += "; in the graph: " + data_dependent + " (sizes follow the data, planned at their bound)";
  } catch (const Error&) {
  }
  if (o.json) {
    nlohmann::ordered_json j = {{"model", o.model},
                                {"producer", info.producer},
                                {"opset", info.opset},
                                {"inputs", value_json(info.inputs)},
                                {"outputs", value_json(info.outputs)},
                                {"parameters", info.parameters},
                                {"ops", info.ops_loaded},
                                {"batch", batch},
                                {"flops", info.flops},
                                {"planned_ops", info.ops_planned},
                                {"arena_bytes", info.arena_bytes},
                                {"unplanned_bytes", info.unplanned_bytes},
                                {"rewrite_counts", info.rewrite_counts},
                                {"rewrites", info.rewrites},
                                {"int8_execution", info.int8_execution},
                                {"detector", detector}};
    nlohmann::ordered_json algorithms = nlohmann::ordered_json::array();
    for (const auto& n : info.implementations)
      algorithms.push_back({{"node", n.node}, {"op", n.op}, {"implementation", n.implementation}});
    j["implementations"] = algorithms;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: ONNX opset %lld, made by %s\n", o.model.c_str(), static_cast<long long>(info.opset),
              info.producer.empty() ? "(unknown)" : info.producer.c_str());
  for (const auto& v : info.inputs)
    std::printf("  input  %s %s %s\n", v.name.c_str(), std::string(dtype_name(v.dtype)).c_str(),
                shape_text(v.shape).c_str());
  for (const auto& v : info.outputs)
    std::printf("  output %s %s %s\n", v.name.c_str(), std::string(dtype_name(v.dtype)).c_str(),
                shape_text(v.shape).c_str());
  std::printf("parameters: %lld\nops in the file:", static_cast<long long>(info.parameters));
  for (const auto& [op, n] : info.ops_loaded) std::printf(" %s %d", op.c_str(), n);
  std::printf("\nat batch %lld: %.3f GFLOP per inference; kernels run:", static_cast<long long>(batch),
              info.flops / 1e9);
  for (const auto& [op, n] : info.ops_planned) std::printf(" %s %d", op.c_str(), n);
  std::printf("\nmemory plan: %.2f MiB for all intermediate values (%.2f MiB without reuse)\noptimiser:",
              static_cast<double>(info.arena_bytes) / (1 << 20),
              static_cast<double>(info.unplanned_bytes) / (1 << 20));
  if (info.rewrite_counts.empty()) std::printf(" nothing to rewrite");
  for (const auto& [kind, n] : info.rewrite_counts) std::printf(" %s x%d;", kind.c_str(), n);
  std::printf("\n");
  if (!info.int8_execution.empty()) std::printf("int8: %s\n", info.int8_execution.c_str());
  if (!detector.empty()) std::printf("detector: %s\n", detector.c_str());
  // The algorithm of each node whose operator has several (CPUDL_CONV_IMPL forces one).
  if (!info.implementations.empty()) std::printf("algorithms:\n");
  for (const auto& n : info.implementations)
    std::printf("  %-40s %-14s %s\n", n.node.c_str(), n.op.c_str(), n.implementation.c_str());
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* r = app.add_subcommand("run", "Run an ONNX model on .npy inputs, optionally timed");
  r->add_option("model", o->model, "Model file (.onnx)")->required();
  r->add_option("--input", o->inputs, "Input .npy file, one per model input in order");
  r->add_option("--output", o->outputs, "Write each output to this .npy file (one per model output)");
  r->add_option("--bench", o->bench, "Time N runs after warm-up: median, p90 and p99 latency, throughput")
      ->check(in_range(1, 1000000));
  r->add_option("--batch", o->batch, "Batch size: repeat or cut the input's samples (or random inputs) to B")
      ->check(in_range(1, 1 << 20));
  add_threads_option(r, o->threads);
  add_governor_option(r, o->governor);
  add_bind_option(r, o->bind);
  r->add_flag("--json", o->json, "One JSON object");
  add_precision_option(r, o->precision);
  add_int8_conv_option(r, o->int8_conv);
  add_max_loop_iterations_option(r, o->max_loop_iterations);
  r->callback([&action, o] {
    action = [o] {
      use_threads(o->threads);
      apply_bind(o->bind);
      return run_model(*o);
    };
  });
}

void add_info_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* i =
      app.add_subcommand("info", "What an ONNX or GGUF model holds, and what cpudl makes of it on this CPU");
  i->add_option("model", o->model, "Model file (.onnx, a cpudl .safetensors, or a .gguf language model)")
      ->required();
  i->add_option("--batch", o->batch,
                "Batch size of the plan to describe (default: the model's first dimension, 1 when free)")
      ->check(in_range(1, 1 << 20));
  i->add_flag("--json", o->json, "One JSON object");
  add_precision_option(i, o->precision);
  add_int8_conv_option(i, o->int8_conv);
  add_max_loop_iterations_option(i, o->max_loop_iterations);
  i->callback([&action, o] { action = [o] { return run_info(*o); }; });
}

}  // namespace cpudl::cli
