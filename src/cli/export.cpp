// `cpudl export MODEL OUT.onnx`: a model cpudl train wrote (or one of its checkpoints) as an ONNX
// file, checked before it is put in place: the file is loaded back by cpudl's ONNX runtime and
// must compute what the model computes on random inputs (torch.onnx.export leaves that check to
// the user; here a wrong file never lands).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/usage_errors.h"
#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "infer/onnx_export.h"
#include "io/file_kind.h"
#include "train/trainer.h"

namespace cpudl::cli {
namespace {

struct ExportOptions {
  std::string model, output;
  std::int64_t check_batch = 2;
  bool json = false;
};

std::string join(const std::vector<float>& values) {
  std::string s;
  for (float v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

// The largest |model - file| over a random batch, relative to the largest |model| output.
double exported_difference(const train::ModelFile& m, const std::filesystem::path& file, std::int64_t batch) {
  Shape shape{batch};
  shape.insert(shape.end(), m.input_shape.begin(), m.input_shape.end());
  const Tensor x = Tensor::randn(shape);
  Tensor want;
  {
    NoGradGuard no_grad;
    want = m.model->forward(x).contiguous();
  }
  InferenceOptions options;
  options.follow_bf16_weights = false;  // the comparison is of f32 arithmetic
  InferenceSession session(file, options);
  const Tensor got = session.run({x}).at(0).contiguous();
  if (got.shape() != want.shape())
    throw Error("export: the ONNX file's output is " + shape_text(got.shape()) + ", the model's " +
                shape_text(want.shape()));
  double diff = 0, scale = 1e-30;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got.data()[i] - want.data()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want.data()[i])));
  }
  return diff / scale;
}

infer::ZooModel zoo_model(const train::ModelFile& m) {
  infer::ZooModel z;
  z.architecture = m.metadata.at("architecture");
  z.weights = m.model->state_dict();
  z.input_shape = m.input_shape;
  z.classes = m.classes;
  z.metadata = {{"architecture", z.architecture},
                {"classes", std::to_string(m.classes)},
                {"normalization_mean", join(m.mean)},
                {"normalization_std", join(m.std)}};
  if (const auto names = m.metadata.find("class_names"); names != m.metadata.end())
    z.metadata["class_names"] = names->second;
  return z;
}

int run_export(const ExportOptions& o) {
  io::require_output_is_not_an_input(o.output, {o.model}, "output");
  if (std::filesystem::is_directory(o.output))
    throw UsageError(o.output + " is a directory: give the .onnx file to write");
  const train::ModelFile m = train::load_model_file(o.model);
  const infer::ZooModel z = zoo_model(m);
  const std::string bytes = infer::export_zoo_onnx(z, CPUDL_VERSION);
  // Written beside the output, checked, then renamed into place: a file that fails the check is
  // removed and the output left as it was.
  const std::filesystem::path staged = o.output + ".checking.onnx";
  io::write_file_atomically(staged, bytes);
  double difference = 0;
  try {
    difference = exported_difference(m, staged, o.check_batch);
    // f32 sums in another order (oneDNN's convolutions against the eager engine's): 1e-4 of the
    // largest output is 100x what they differ by; a wrong layer differs by order 1.
    if (!(difference < 1e-4))
      throw Error("export: the ONNX file computes other outputs than " + o.model + " (largest difference " +
                  std::to_string(difference) + " of the largest output); nothing written");
  } catch (...) {
    std::filesystem::remove(staged);
    throw;
  }
  std::filesystem::rename(staged, o.output);
  std::int64_t parameters = 0;
  for (const auto& [name, t] : z.weights)
    if (t.dtype() == DType::f32) parameters += t.numel();
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"model", o.model},
                                               {"architecture", z.architecture},
                                               {"output", o.output},
                                               {"opset", 17},
                                               {"bytes", bytes.size()},
                                               {"parameters", parameters},
                                               {"checked_batch", o.check_batch},
                                               {"max_relative_difference", difference}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "exported %s (%lld parameters) to %s: ONNX opset 17, %.2f MB, input [batch, %s] normalised with the "
        "model's mean and std (in metadata_props); checked: cpudl's ONNX runtime matches the model within "
        "%.1e "
        "of its largest output on %lld random inputs\n",
        z.architecture.c_str(), static_cast<long long>(parameters), o.output.c_str(),
        static_cast<double>(bytes.size()) / 1e6,
        shape_text(m.input_shape).substr(1, shape_text(m.input_shape).size() - 2).c_str(), difference,
        static_cast<long long>(o.check_batch));
  }
  return 0;
}

}  // namespace

OnnxInput::OnnxInput(const std::string& model) : path_(model) {
  if (io::file_kind(model) != io::FileKind::safetensors) return;  // ONNX, or the loader's error
  const train::ModelFile m = train::load_model_file(model);
  const std::string bytes = infer::export_zoo_onnx(zoo_model(m), CPUDL_VERSION);
  path_ = (std::filesystem::temp_directory_path() / ("cpudl-export-" + std::to_string(getpid()) + "-" +
                                                     std::filesystem::path(model).stem().string() + ".onnx"))
              .string();
  io::write_file_atomically(path_, bytes);
  exported_ = true;
}

OnnxInput::~OnnxInput() {
  if (!exported_) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void add_export_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* e = app.add_subcommand(
      "export",
      "Write a model cpudl train made (or its checkpoint) as an ONNX file, checked against the model");
  e->add_option("model", o->model, "Model file (.safetensors, as cpudl train writes it, or its .ckpt)")
      ->required();
  e->add_option("output", o->output, "ONNX file to write")->required();
  e->add_option("--check-batch", o->check_batch, "Random inputs the written file is checked on (default 2)")
      ->check(in_range(1, 1024));
  e->add_flag("--json", o->json, "One JSON object instead of the sentence");
  e->callback([&action, o] { action = [o] { return run_export(*o); }; });
}

}  // namespace cpudl::cli
