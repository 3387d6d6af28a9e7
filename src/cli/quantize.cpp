// `cpudl quantize`: for GGUF models, `IN.gguf OUT.gguf --type T` re-encodes the weight matrices
// (llm/gguf/requantize.h); for ONNX models,
// `IN.onnx OUT.onnx --mode dynamic` (quantize_onnx.cpp). The input is only read; the output is
// written to a temporary file and renamed into place.
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/usage_errors.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "io/file_kind.h"
#include "io/metadata_lists.h"
#include "llm/gguf/requantize.h"
#include "train/exported_classifier.h"

namespace cpudl::cli {
namespace {

struct QuantizeOptions {
  std::string input, output, type;
  QuantizeOnnxOptions onnx;
};

bool ends_with(const std::string& s, const char* suffix) {
  const std::string tail(suffix);
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// --calib DATA_DIR for a classifier cpudl trained (or exported): the directory's training split,
// normalised as the model's data was, calibrates (--calib-samples rows spread evenly over it), and
// its test split with its labels makes the report (the calibration rows when it has none), so
// the report gives float and int8 accuracy on held-out data. A directory of .npy batches is not
// a dataset: those stay raw inputs.
std::optional<QuantizeDataset> dataset_inputs(const std::string& model, const QuantizeOnnxOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (o.calib.empty() || !fs::is_directory(o.calib, ec)) return std::nullopt;
  for (const auto& e : fs::directory_iterator(o.calib, ec))
    if (e.path().extension() == ".npy") return std::nullopt;
  // Only a classifier cpudl made says how its images were normalised: any other ONNX model takes
  // .npy inputs.
  if (io::file_kind(model) == io::FileKind::onnx && !train::is_exported_classifier(InferenceSession(model)))
    return std::nullopt;
  if (!o.eval.empty() || !o.labels.empty())
    throw UsageError("--calib " + o.calib +
                     " is a dataset, whose test split and labels make the report: "
                     "--eval and --labels are for .npy inputs");
  const train::ModelFile m = train::load_classifier(model);
  const auto check_normalisation = [&](const data::Dataset& d) {
    if (d.mean != m.mean || d.std != m.std)
      throw Error("--calib " + o.calib + ": its images are normalised with mean " + io::join_floats(d.mean) +
                  ", std " + io::join_floats(d.std) + "; " + model + " was trained on mean " +
                  io::join_floats(m.mean) + ", std " + io::join_floats(m.std));
    if (d.classes != m.classes)
      throw Error("--calib " + o.calib + ": " + std::to_string(d.classes) + " classes, " + model + " has " +
                  std::to_string(m.classes));
  };
  const data::Dataset train_split = data::load_dataset(o.calib, true, m.input_shape);
  check_normalisation(train_split);
  const std::int64_t n = train_split.images.size(0), take = std::min(o.calib_samples, n);
  const auto rows = [](const data::Dataset& d, const std::vector<std::int64_t>& picked, std::int64_t from,
                       std::int64_t count) {
    Shape shape = d.images.shape();
    shape[0] = count;
    Tensor x = Tensor::empty(shape);
    const std::int64_t row = d.images.numel() / d.images.size(0);
    const Tensor all = d.images.contiguous();
    for (std::int64_t i = 0; i < count; ++i)
      std::copy_n(all.data() + picked[static_cast<std::size_t>(from + i)] * row, row, x.data() + i * row);
    return x;
  };
  std::vector<std::int64_t> picked;  // evenly spread: every class of a sorted image folder is seen
  for (std::int64_t i = 0; i < take; ++i) picked.push_back(i * n / take);
  QuantizeDataset out;
  constexpr std::int64_t kBatch = 32;
  for (std::int64_t i = 0; i < take; i += kBatch)
    out.calib.emplace_back("calibration rows " + std::to_string(i + 1),
                           rows(train_split, picked, i, std::min(kBatch, take - i)));
  out.calib_source = o.calib + "'s training split";
  if (data::has_test_split(o.calib)) {
    const data::Dataset test = data::load_dataset(o.calib, false, m.input_shape);
    check_normalisation(test);
    std::vector<std::int64_t> all(static_cast<std::size_t>(test.images.size(0)));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
    const auto count = static_cast<std::int64_t>(all.size());
    for (std::int64_t i = 0; i < count; i += 250)
      out.eval.emplace_back("test rows " + std::to_string(i + 1),
                            rows(test, all, i, std::min<std::int64_t>(250, count - i)));
    out.labels = test.labels.contiguous();
    out.eval_source = o.calib + "'s test split (" + std::to_string(count) + " images)";
  } else {
    out.eval = out.calib;
    out.labels = Tensor::empty({take}, DType::i64);
    for (std::int64_t i = 0; i < take; ++i)
      out.labels.data_as<std::int64_t>()[i] =
          train_split.labels.data_as<std::int64_t>()[picked[static_cast<std::size_t>(i)]];
    out.eval_source = "the calibration rows (" + o.calib + " has no test split)";
  }
  return out;
}

int run_quantize(QuantizeOptions& o) {
  // The format by content (a renamed file too); a cpudl model is quantised as its ONNX export.
  std::error_code ec;
  const bool readable = std::filesystem::is_regular_file(o.input, ec);
  const auto cannot_open = [&] {
    return Error(o.input + ": cannot open (" +
                 (std::filesystem::exists(o.input, ec) ? "not a regular file" : "No such file or directory") +
                 ")");
  };
  const io::FileKind kind = readable ? io::file_kind(o.input) : io::FileKind::unknown;
  if (kind == io::FileKind::onnx || kind == io::FileKind::safetensors ||
      (kind == io::FileKind::unknown && ends_with(o.input, ".onnx"))) {
    if (!o.type.empty())
      throw UsageError("--type is for GGUF models; ONNX and cpudl models take --mode dynamic|static|bf16");
    if (o.onnx.mode.empty()) throw UsageError(o.input + ": give --mode dynamic|static|bf16");
    if (!readable) throw cannot_open();
    io::require_output_is_not_an_input(o.output, {o.input}, "output");
    o.onnx.dataset = dataset_inputs(o.input, o.onnx);
    const OnnxInput file(o.input);
    o.onnx.input = file.path();
    o.onnx.shown_input = o.input;
    o.onnx.output = o.output;
    return run_quantize_onnx(o.onnx);
  }
  if (kind != io::FileKind::gguf && !(kind == io::FileKind::unknown && ends_with(o.input, ".gguf"))) {
    if (!readable) throw cannot_open();
    const std::string what = io::file_kind_description(kind);
    throw UsageError(o.input + ": " + (what.empty() ? "not" : what + ", not") +
                     " a model quantize takes (GGUF, ONNX, or a cpudl .safetensors model)");
  }
  if (!o.onnx.mode.empty() || !o.onnx.calib.empty())
    throw UsageError("--mode and --calib are for ONNX models; GGUF models take --type");
  if (o.type.empty()) throw UsageError(o.input + ": give --type q8_0|q4_0|q4_k|q4_k_m|q6_k|f16|bf16|f32");
  if (!llm::is_requantize_type(o.type))
    throw UsageError("--type '" + o.type + "': expected " + std::string(llm::requantize_type_names()));
  io::require_output_is_not_an_input(o.output, {o.input}, "output");
  Progress progress("quantize " + o.input + " to " + o.type, 0);
  const llm::RequantizeSummary done = llm::requantize_gguf(
      o.input, o.output, o.type, [&](std::size_t index, std::size_t count, const std::string& name) {
        progress.set_total(static_cast<std::int64_t>(count));
        progress.update(static_cast<std::int64_t>(index), name);
      });
  progress.clear();
  std::string summary;
  for (const auto& [type, n] : done.tensors)
    summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + type;
  std::printf("%s -> %s: %zu tensors (%s), %.1f MB -> %.1f MB\n", o.input.c_str(), o.output.c_str(),
              done.tensor_count, summary.c_str(), static_cast<double>(done.bytes_in) / 1e6,
              static_cast<double>(done.bytes_out) / 1e6);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* q = app.add_subcommand(
      "quantize",
      "Quantise a model: GGUF weights to q8_0, q4_0, q4_k, q4_k_m (llama.cpp's mix), q6_k, f16, bf16, f32; "
      "ONNX models to dynamic int8 (MatMul/Gemm), static int8 (QDQ Conv/Gemm/MatMul) or bf16, "
      "with an accuracy report");
  q->add_option("input", o->input, "Input model (.gguf or .onnx); never modified")->required();
  q->add_option("output", o->output, "Output model (same format)")->required();
  q->add_option("--type", o->type, "GGUF: weight type of the output");
  q->add_option(
      "--mode", o->onnx.mode,
      "ONNX: dynamic (int8 MatMul/Gemm, activations quantised per run), static (QDQ Conv/Gemm/MatMul, "
      "activations calibrated on --calib) or bf16 (Conv/Gemm/MatMul weights stored bfloat16; computed in "
      "bf16 on AMX/AVX512-BF16)");
  q->add_option("--observer", o->onnx.observer, "ONNX static: minmax (default) or percentile");
  q->add_option("--percentile", o->onnx.percentile,
                "ONNX static: the percentile observer's clip point (default 99.99)");
  q->add_option("--calib", o->onnx.calib,
                "ONNX: .npy file or folder of .npy batches: calibrates the activations (static mode, "
                "required) and is the accuracy report's data unless --eval is given. For a cpudl model "
                "(or its export) also a dataset directory: its training split calibrates, its test split "
                "and labels make the report");
  q->add_option("--calib-samples", o->onnx.calib_samples,
                "With a dataset --calib: how many training images calibrate (default 256)")
      ->check(in_range(1, 1 << 24));
  q->add_option("--eval", o->onnx.eval,
                "ONNX: .npy file or folder of .npy batches for the accuracy report (default: --calib)");
  q->add_option("--labels", o->onnx.labels,
                "ONNX: .npy of int labels for the report's rows (--eval, else --calib): top-1 accuracy");
  q->add_option("--max-weight-error", o->onnx.max_weight_error,
                "ONNX: keep a layer in float when its weights' relative RMS error exceeds this")
      ->check(positive_number());
  q->add_flag("--reduce-range", o->onnx.reduce_range,
              "ONNX: 7-bit weights, the int8 product's fastest exact path on CPUs without VNNI (one bit less "
              "precision)");
  add_threads_option(q, o->onnx.threads);
  q->add_flag("--json", o->onnx.json, "ONNX: the report as one JSON object");
  q->callback([&action, o] { action = [o] { return run_quantize(*o); }; });
}

}  // namespace cpudl::cli
