// `cpudl bench model`: a zoo model's inference or training step (or a model file's inference) on
// random data, as images/s,
// ms/step, GFLOP/s and % of the fp32 FMA roof measured in the same run, so a user sees what
// their own CPU does with a whole network rather than with one kernel.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/usage_errors.h"
#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/nn.h"
#include "cpudl/ops.h"
#include "cpudl/optim.h"
#include "cpudl/runtime.h"
#include "io/file_kind.h"
#include "train/trainer.h"

namespace cpudl::cli {
namespace {

struct ModelBenchOptions {
  std::string model = "simplecnn";
  std::int64_t batch = 64, image_size = 0, classes = 10;
  bool train = false, json = false, cifar_stem = false, checkpoint_activations = false;
  std::string optimizer = "adam", precision = "fp32";
  int steps = 20, threads = 0;
};

// Timed steps after two warm-up steps: their sorted durations (the median is the figure).
std::vector<double> time_steps(const ModelBenchOptions& o, const std::function<void()>& step) {
  std::vector<double> seconds;
  Progress progress("bench model " + o.model, o.steps, !o.json);
  for (int i = 0; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    progress.update(i + 1, "steps");
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

// What both kinds of run report: the median step against the fp32 FMA roof measured right after.
struct StepFigures {
  double median, flops, roof, gflops;
  int threads;
  void add_to(nlohmann::ordered_json& j, std::int64_t batch) const {
    j["threads"] = threads;
    j["images_per_second"] = static_cast<double>(batch) / median;
    j["ms_per_step"] = median * 1e3;
    j["gflop_per_step"] = flops / 1e9;
    j["gflops"] = gflops;
    j["peak_gflops"] = roof;
    j["pct_peak"] = 100 * gflops / roof;
  }
};
StepFigures step_figures(const std::vector<double>& sorted_seconds, double flops) {
  const double median = sorted_seconds[sorted_seconds.size() / 2];
  const int threads = compute_threads();
  const double roof = measure_compute_roof(ComputeRoof::fp32_fma, threads, 0.3).gops;
  return {median, flops, roof, flops / median / 1e9, threads};
}

// --model FILE: inference of a model file on random inputs of its sample shape, as the zoo
// models are timed: a cpudl model or checkpoint on the eager engine, an ONNX file (cpudl export's
// or quantize's, or any with one input of fixed sample shape) on the ONNX runtime, as cpudl run
// and eval run them. GFLOP/s counts an int8 model's multiply-adds as a float model's.
int run_file_bench(const ModelBenchOptions& o) {
  if (o.train)
    throw UsageError("--train: a model file is timed for inference; training takes a zoo model name");
  if (o.checkpoint_activations || o.cifar_stem || o.image_size > 0)
    throw UsageError(o.model +
                     ": a model file has its own input size and layers (--image-size, --cifar-stem and "
                     "--checkpoint-activations are for zoo models)");
  const bool onnx = io::file_kind(o.model) == io::FileKind::onnx;
  if (onnx && o.precision != "fp32")
    throw UsageError("--precision " + o.precision +
                     ": an ONNX file runs as stored (cpudl quantize --mode bf16 "
                     "makes a bf16 one)");
  std::optional<Bf16Autocast> autocast;
  if (o.precision == "bf16") autocast.emplace();
  Shape shape{o.batch};
  double flops = 0;
  std::int64_t parameters = 0;
  std::function<void(const Tensor&)> forward;
  std::unique_ptr<InferenceSession> session;
  nn::ModulePtr model;
  if (onnx) {
    session = std::make_unique<InferenceSession>(o.model);
    if (session->inputs().size() != 1) throw Error(o.model + ": bench model times models with one input");
    const Shape& in = session->inputs()[0].shape;
    for (std::size_t d = 1; d < in.size(); ++d) {
      if (in[d] <= 0)
        throw Error(o.model + ": input '" + session->inputs()[0].name + "' " + shape_text(in) +
                    " has a free dimension besides the batch: time it with cpudl run --bench");
      shape.push_back(in[d]);
    }
    const ModelInfo info = session->info({shape});
    flops = info.flops;
    parameters = info.parameters;
    forward = [&](const Tensor& x) { (void)session->run({x}); };
  } else {
    const train::ModelFile m = train::load_model_file(o.model);
    shape.insert(shape.end(), m.input_shape.begin(), m.input_shape.end());
    model = m.model;
    model->train(false);
    parameters = model->parameter_count();
    forward = [&](const Tensor& x) {
      NoGradGuard no_grad;
      model->forward(x);
    };
  }
  Generator gen(0);
  const Tensor x = Tensor::rand(shape, gen);
  reset_forward_flops();
  forward(x);  // warm-up: the plan, primitives, caches, page faults
  if (!onnx) flops = forward_flops();
  forward(x);
  const StepFigures f = step_figures(time_steps(o, [&] { forward(x); }), flops);
  const char* engine = onnx ? "ONNX runtime" : "eager engine";
  if (o.json) {
    nlohmann::ordered_json j{{"model", o.model},         {"engine", engine}, {"mode", "inference"},
                             {"precision", o.precision}, {"batch", o.batch}, {"input_shape", shape},
                             {"parameters", parameters}};
    f.add_to(j, o.batch);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "%s (%s) inference%s, input %s, %d threads: %.0f images/s, %.2f ms/step, %.2f GFLOP/step, %.1f GFLOP/s "
      "= "
      "%.0f%% of the fp32 FMA roof (%.0f GFLOP/s measured now)\n",
      o.model.c_str(), engine, autocast ? " (bf16 autocast)" : "", shape_text(shape).c_str(), f.threads,
      static_cast<double>(o.batch) / f.median, f.median * 1e3, flops / 1e9, f.gflops, 100 * f.gflops / f.roof,
      f.roof);
  return 0;
}

int run_model_bench(const ModelBenchOptions& o) {
  const auto names = nn::model_names();
  if (std::error_code ec; std::find(names.begin(), names.end(), o.model) == names.end() &&
                          std::filesystem::is_regular_file(o.model, ec))
    return run_file_bench(o);
  if (std::find(names.begin(), names.end(), o.model) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw UsageError("--model " + o.model + ": not a zoo model (" + list + ") nor a model file");
  }
  if (o.optimizer != "adam" && o.optimizer != "sgd") throw UsageError("--optimizer must be adam or sgd");
  if (o.precision != "fp32" && o.precision != "bf16") throw UsageError("--precision must be fp32 or bf16");
  const bool bf16 = o.precision == "bf16";
  // Convolutions and linear layers in bf16 for the whole run, as torch.autocast: in training
  // their backward passes too, with f32 weights and optimiser state (throws if the CPU has no
  // bf16).
  std::optional<Bf16Autocast> autocast;
  if (bf16) autocast.emplace();
  // MNIST models take 1 x 28 x 28; resnet18 3 x S x S (32 by default) with torchvision's stem
  // (7x7 stride-2 conv and max pooling) unless --cifar-stem.
  const bool resnet = o.model == "resnet18";
  const std::int64_t size = o.image_size > 0 ? o.image_size : (resnet ? 32 : 28);
  if (!resnet && size != 28) throw UsageError("--image-size: " + o.model + " takes 28x28 images");
  if (!resnet && o.cifar_stem) throw UsageError("--cifar-stem: only resnet18 has a stem to choose");
  const std::int64_t classes = o.classes, channels = resnet ? 3 : 1;
  nn::ModulePtr model = nn::make_model(o.model, classes, channels, o.cifar_stem);
  if (o.checkpoint_activations && !o.train)
    throw UsageError("--checkpoint-activations applies to --train (inference keeps no activations)");
  if (o.checkpoint_activations && !model->checkpoint_activations(true))
    throw UsageError("--checkpoint-activations: " + o.model +
                     " has no layer groups to recompute (resnet18 has)");
  Generator gen(0);
  const Tensor x = Tensor::rand({o.batch, channels, size, size}, gen);
  Tensor labels = Tensor::empty({o.batch}, DType::i64);
  for (std::int64_t i = 0; i < o.batch; ++i)
    labels.data_as<std::int64_t>()[i] = static_cast<std::int64_t>(gen.next_u64() % classes);

  std::unique_ptr<optim::Optimizer> optimizer;
  if (o.optimizer == "sgd")
    optimizer = std::make_unique<optim::Sgd>(model->parameters(), optim::SgdOptions{0.01f, 0.9f});
  else
    optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{});
  auto step = [&] {
    if (o.train) {
      optimizer->zero_grad();
      Tensor loss = cross_entropy(model->forward(x), labels);
      loss.backward();
      optimizer->step();
    } else {
      NoGradGuard no_grad;
      model->forward(x);
    }
  };
  model->train(o.train);
  reset_forward_flops();
  step();  // warm-up: primitives, caches, page faults; also counts one forward pass
  // A checkpointed step runs its segments' forward twice; the work it does for the user (what the
  // GFLOP/s count) is one forward and a backward all the same: count a forward without a graph.
  if (o.checkpoint_activations) {
    reset_forward_flops();
    NoGradGuard no_grad;
    model->forward(x);
  }
  const double forward = forward_flops();
  const double flops = o.train ? 3 * forward : forward;
  step();
  reset_op_profile();  // the profile covers the timed steps only
  const StepFigures f = step_figures(time_steps(o, step), flops);
  if (op_profiling_enabled()) print_op_profile(o.steps, f.roof);
  if (o.json) {
    nlohmann::ordered_json j{{"model", o.model},
                             {"mode", o.train ? "train" : "inference"},
                             {"precision", o.precision},
                             {"checkpoint_activations", o.checkpoint_activations},
                             {"optimizer", o.train ? o.optimizer : ""},
                             {"batch", o.batch},
                             {"image_size", size},
                             {"parameters", model->parameter_count()}};
    f.add_to(j, o.batch);
    j["peak_memory_bytes"] = peak_resident_bytes();
    j["peak_tensor_bytes"] = peak_tensor_bytes();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "%s %s%s%s, batch %lld at %lldx%lld, %d threads: %.0f images/s, %.2f ms/step, %.2f GFLOP/step, "
      "%.1f GFLOP/s = %.0f%% of the fp32 FMA roof (%.0f GFLOP/s measured now)\n",
      o.model.c_str(), o.train ? ("training (" + o.optimizer + ")").c_str() : "inference",
      bf16 ? " (bf16 autocast)" : "", o.checkpoint_activations ? " (activation checkpointing)" : "",
      static_cast<long long>(o.batch), static_cast<long long>(size), static_cast<long long>(size), f.threads,
      static_cast<double>(o.batch) / f.median, f.median * 1e3, flops / 1e9, f.gflops, 100 * f.gflops / f.roof,
      f.roof);
  return 0;
}

}  // namespace

void add_bench_model_command(CLI::App& bench, Action& action) {
  auto o = std::make_shared<ModelBenchOptions>();
  CLI::App* m =
      bench.add_subcommand("model", "A zoo model's inference or training step: images/s, GFLOP/s, % of peak");
  m->add_option("--model", o->model,
                "simplecnn, lenet5, mlp or resnet18 (default simplecnn), or a model file: a cpudl model or "
                "checkpoint, or an ONNX file (cpudl export's or quantize's), timed for inference");
  m->add_option("--batch", o->batch, "Batch size (default 64)")->check(in_range(1, 1 << 16));
  m->add_flag("--train", o->train,
              "Time a training step (forward, backward, optimiser) instead of inference");
  m->add_option("--optimizer", o->optimizer, "adam (default) or sgd (momentum 0.9) for --train");
  m->add_option("--precision", o->precision,
                "fp32 (default) or bf16: convolutions and linear layers (forward and, with --train, "
                "backward) in bf16 as torch.autocast; needs AVX512-BF16 or AMX");
  m->add_flag("--checkpoint-activations", o->checkpoint_activations,
              "With --train: recompute each residual block's activations in backward instead of keeping them "
              "(resnet18)");
  m->add_option("--image-size", o->image_size, "resnet18 input size (default 32)")->check(in_range(8, 1024));
  m->add_flag("--cifar-stem", o->cifar_stem, "resnet18 with a 3x3 stride-1 first conv and no max pooling");
  m->add_option("--classes", o->classes, "Output classes (default 10)")->check(in_range(2, 100000));
  m->add_option("--steps", o->steps, "Timed steps after two warm-up steps (default 20)")
      ->check(in_range(1, 100000));
  add_threads_option(m, o->threads);
  m->add_flag("--json", o->json, "One JSON object");
  m->callback([&action, o] {
    action = [o] {
      use_threads(o->threads);
      return run_model_bench(*o);
    };
  });
}

}  // namespace cpudl::cli
