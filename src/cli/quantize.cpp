// `cpudl quantize`: for GGUF models, `IN.gguf OUT.gguf --type T` re-encodes the weight matrices
// (vectors such as norms and biases stay F32), copying all metadata; for ONNX models,
// `IN.onnx OUT.onnx --mode dynamic` (quantize_onnx.cpp). The input is only read; the output is
// written to a temporary file and renamed into place.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/usage_errors.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "io/file_kind.h"
#include "io/metadata_lists.h"
#include "llm/gguf/gguf.h"
#include "llm/gguf/quantize.h"
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

struct TargetType {
  const char* name;
  GgmlType type;
  std::uint32_t file_type;  // general.file_type as llama.cpp numbers it
};
const TargetType kTargets[] = {{"f32", GgmlType::f32, 0},      {"f16", GgmlType::f16, 1},
                               {"bf16", GgmlType::bf16, 32},   {"q8_0", GgmlType::q8_0, 7},
                               {"q4_0", GgmlType::q4_0, 2},    {"q4_k", GgmlType::q4_k, 14},
                               {"q4_k_m", GgmlType::q4_k, 15}, {"q6_k", GgmlType::q6_k, 18}};

// Q4_K_M, the mix most GGUF downloads use, as llama.cpp's quantize makes it: Q4_K everywhere but
// the output matrix and, in the first and last eighth of the layers and every third one between,
// the attention values and the feed-forward down projection, which take Q6_K (the tensors whose
// error costs the most perplexity). A tensor's layer is read from its blk.N. name.
GgmlType q4_k_m_type(const std::string& name, std::int64_t layers) {
  if (name == "output.weight") return GgmlType::q6_k;
  const bool values = name.ends_with(".attn_v.weight"), down = name.ends_with(".ffn_down.weight");
  if (!name.starts_with("blk.") || !(values || down) || layers < 1) return GgmlType::q4_k;
  std::int64_t i = 0;
  const char* digits = name.data() + 4;
  if (std::from_chars(digits, name.data() + name.size(), i).ec != std::errc{}) return GgmlType::q4_k;
  const std::int64_t n = layers;
  const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  return more_bits ? GgmlType::q6_k : GgmlType::q4_k;
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
  const TargetType* target = nullptr;
  for (const auto& t : kTargets)
    if (o.type == t.name) target = &t;
  if (target == nullptr)
    throw UsageError("--type '" + o.type + "': expected f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m or q6_k");
  io::require_output_is_not_an_input(o.output, {o.input}, "output");
  const llm::GgufFile in = llm::GgufFile::open(o.input);
  const bool mixed = o.type == "q4_k_m";
  const std::int64_t layers =
      mixed && in.has("general.architecture")
          ? in.get_int(std::string(in.get_string("general.architecture")) + ".block_count", 0)
          : 0;

  std::vector<llm::GgufWriterValue> metadata;
  for (const auto& [key, value] : in.metadata()) {
    if (key == "general.alignment") continue;  // written by write_gguf when not the default
    llm::GgufWriterValue v{key, value};
    if (key == "general.file_type") {
      v.value.type = llm::GgufValueType::u32;
      v.value.i = target->file_type;
    }
    metadata.push_back(std::move(v));
  }
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<llm::GgufWriterTensor> tensors;
  std::map<std::string, int> counts;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  buffers.reserve(in.tensors().size());
  Progress progress("quantize " + o.input + " to " + o.type, static_cast<std::int64_t>(in.tensors().size()));
  for (const llm::GgufTensor& t : in.tensors()) {
    progress.update(static_cast<std::int64_t>(tensors.size()), t.name);
    bytes_in += t.bytes;
    GgmlType to = t.dims.size() < 2 ? t.type : mixed ? q4_k_m_type(t.name, layers) : target->type;
    const std::uint32_t block = llm::ggml_type_info(static_cast<std::uint32_t>(to))->block_size;
    if (t.dims[0] % block != 0)
      to = t.dims[0] % 32 == 0 ? GgmlType::q8_0 : GgmlType::f16;  // rows too short for the type
    if (to == t.type) {
      tensors.push_back({t.name, t.type, t.dims, {t.data, t.bytes}});
      bytes_out += t.bytes;
      ++counts[std::string(llm::ggml_type_info(static_cast<std::uint32_t>(to))->name) + " (kept)"];
      continue;
    }
    if (!llm::is_compute_type(t.type))
      throw Error(in.name() + ": tensor '" + t.name + "' has type " +
                  llm::ggml_type_info(static_cast<std::uint32_t>(t.type))->name +
                  ", which cpudl cannot convert");
    const std::size_t cols = t.dims[0], rows = t.elements() / cols;
    const std::size_t in_row = llm::row_bytes(t.type, cols), out_row = llm::row_bytes(to, cols);
    std::vector<std::uint8_t>& out = buffers.emplace_back(rows * out_row);
    std::vector<float> row(cols);
    for (std::size_t r = 0; r < rows; ++r) {
      llm::dequantize_row(t.type, t.data + r * in_row, row.data(), cols);
      llm::quantize_row(to, row.data(), out.data() + r * out_row, cols);
    }
    tensors.push_back({t.name, to, t.dims, {out.data(), out.size()}});
    bytes_out += out.size();
    ++counts[llm::ggml_type_info(static_cast<std::uint32_t>(to))->name];
  }
  progress.clear();
  llm::write_gguf(o.output, metadata, tensors, in.alignment());
  std::string summary;
  for (const auto& [type, n] : counts)
    summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + type;
  std::printf("%s -> %s: %zu tensors (%s), %.1f MB -> %.1f MB\n", o.input.c_str(), o.output.c_str(),
              tensors.size(), summary.c_str(), static_cast<double>(bytes_in) / 1e6,
              static_cast<double>(bytes_out) / 1e6);
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
