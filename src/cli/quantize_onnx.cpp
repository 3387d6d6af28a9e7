// `cpudl quantize IN.onnx OUT.onnx --mode dynamic|static|bf16`: writes the int8 (or bf16) model
// (infer/quantizer.h; static mode calibrates on --calib), then measures what it costs: both models
// run on the calibration inputs (or, for dynamic mode without --calib, seeded random ones), and
// the report gives top-1 agreement and the outputs' error, and top-1 accuracy of both when labels
// are given.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/progress.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "infer/quantizer.h"

namespace cpudl::cli {
namespace {

namespace fs = std::filesystem;

// Input batches from `where` (--calib or --eval): one .npy file, or every .npy in a folder (in
// name order); none given: 8 seeded N(0, 1) rows.
std::vector<std::pair<std::string, Tensor>> input_batches(const std::string& flag, const std::string& where,
                                                          const ModelValue& input) {
  std::vector<std::pair<std::string, Tensor>> batches;
  if (where.empty()) {
    Shape shape = input.shape;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] >= 0) continue;
      if (d != 0)
        throw UsageError("input '" + input.name +
                         "' has a free dimension besides the batch: give inputs with --calib");
      shape[d] = 8;
    }
    Generator gen(1234);
    batches.emplace_back("random", Tensor::randn(shape, gen));
    return batches;
  }
  std::vector<fs::path> files;
  if (fs::is_directory(where)) {
    for (const auto& e : fs::directory_iterator(where))
      if (e.path().extension() == ".npy") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw UsageError(flag + " " + where + ": the folder holds no .npy files");
  } else {
    files.push_back(where);
  }
  for (const auto& f : files) {
    Tensor t = io::load_npy(f);
    if (t.dtype() != input.dtype)
      throw Error(f.string() + ": holds " + std::string(dtype_name(t.dtype())) + ", the model's input '" +
                  input.name + "' takes " + std::string(dtype_name(input.dtype)));
    if (t.dim() != static_cast<std::int64_t>(input.shape.size()) || t.numel() == 0)
      throw Error(f.string() + ": shape " + shape_text(t.shape()) + " does not fit the model's input '" +
                  input.name + "' " + shape_text(input.shape));
    for (std::size_t d = 0; d < input.shape.size(); ++d)
      if (input.shape[d] >= 0 && t.shape()[d] != input.shape[d])
        throw Error(f.string() + ": shape " + shape_text(t.shape()) + " does not fit the model's input '" +
                    input.name + "' " + shape_text(input.shape));
    batches.emplace_back(f.string(), std::move(t));
  }
  return batches;
}

std::int64_t row_argmax(const float* row, std::int64_t n) { return std::max_element(row, row + n) - row; }

struct Agreement {
  std::int64_t samples = 0, agree = 0, correct_float = 0, correct_int8 = 0;
  double max_error = 0, sum_error = 0, values = 0, scale = 0;
  bool classes = false;
};

}  // namespace

int run_quantize_onnx(const QuantizeOnnxOptions& o) {
  if (o.mode != "dynamic" && o.mode != "static" && o.mode != "bf16")
    throw UsageError("--mode '" + o.mode + "': expected dynamic, static or bf16");
  const std::string kind = o.mode == "bf16" ? "bf16" : "int8";
  if (!o.labels.empty() && o.calib.empty() && o.eval.empty())
    throw UsageError("--labels needs the inputs they label: give --eval (or --calib)");
  if (o.mode == "static" && o.calib.empty())
    throw UsageError("--mode static calibrates the activations: give --calib");
  if (o.observer != "minmax" && o.observer != "percentile")
    throw UsageError("--observer '" + o.observer + "': expected minmax or percentile");
  if (!(o.percentile > 50.0 && o.percentile <= 100.0)) throw UsageError("--percentile must lie in (50, 100]");
  io::require_output_is_not_an_input(o.output, {o.input, o.calib, o.eval, o.labels}, "output");
  const std::string& shown = o.shown_input.empty() ? o.input : o.shown_input;
  use_threads(o.threads);
  infer::QuantizeOptions options;
  options.max_weight_error = o.max_weight_error;
  options.reduce_range = o.reduce_range;
  options.observer = o.observer == "minmax" ? infer::Observer::min_max : infer::Observer::percentile;
  options.percentile = o.percentile;

  InferenceSession reference(o.input);
  if (reference.inputs().size() != 1) throw Error(shown + ": cpudl quantize needs a model with one input");
  const auto calib = o.dataset ? o.dataset->calib : input_batches("--calib", o.calib, reference.inputs()[0]);
  // The report runs on --eval when given (held-out data, say), else on the calibration inputs.
  const auto batches = o.dataset        ? o.dataset->eval
                       : o.eval.empty() ? calib
                                        : input_batches("--eval", o.eval, reference.inputs()[0]);
  // Everything the report needs is checked before the model is written: a bad label file must
  // not leave a quantised model behind.
  Tensor labels = o.dataset ? o.dataset->labels : Tensor();
  if (!o.labels.empty()) {
    labels = io::load_npy(o.labels);
    if (labels.dtype() != DType::i64 && labels.dtype() != DType::i32)
      throw Error(o.labels + ": labels must be int64 or int32, found " +
                  std::string(dtype_name(labels.dtype())));
    std::int64_t rows = 0;
    for (const auto& [name, x] : batches) rows += x.dim() >= 1 ? x.shape()[0] : 1;
    if (labels.numel() != rows)
      throw Error(o.labels + ": holds " + std::to_string(labels.numel()) + " labels for " +
                  std::to_string(rows) + " input rows");
  }
  Progress calibrating("quantize: calibrating", 1, !o.json);  // the total comes with the first batch
  options.on_calibration_batch = [&](std::size_t done, std::size_t total) {
    calibrating.set_total(static_cast<std::int64_t>(total));
    calibrating.update(static_cast<std::int64_t>(done));
  };
  infer::QuantizeResult r;
  if (o.mode == "dynamic") {
    r = infer::quantize_onnx_dynamic(o.input, o.output, options);
  } else if (o.mode == "bf16") {
    r = infer::quantize_onnx_bf16(o.input, o.output, options);
  } else {
    std::vector<Tensor> calibration;
    for (const auto& [name, t] : calib) calibration.push_back(t);
    r = infer::quantize_onnx_static(o.input, o.output, calibration, options);
  }
  calibrating.clear();
  InferenceSession quantized(o.output);
  Agreement a;
  Progress comparing("quantize: comparing with the float model", static_cast<std::int64_t>(batches.size()),
                     !o.json);
  std::int64_t compared = 0;
  for (const auto& [name, x] : batches) {
    comparing.update(compared++);
    std::vector<Tensor> y0, y1;
    try {
      y0 = reference.run({x});
      y1 = quantized.run({x});
    } catch (const Error& e) {
      throw Error(name + ": " + e.what());
    }
    const Tensor& f = y0[0];
    const Tensor& q = y1[0];
    const std::int64_t rows = f.dim() >= 1 ? f.shape()[0] : 1,
                       cols = f.numel() / std::max<std::int64_t>(1, rows);
    a.classes = cols > 1;
    const float* fp = f.data();
    const float* qp = q.data();
    for (std::int64_t i = 0; i < f.numel(); ++i) {
      const double e = std::fabs(static_cast<double>(fp[i]) - qp[i]);
      a.max_error = std::max(a.max_error, e);
      a.sum_error += e;
      a.scale = std::max(a.scale, std::fabs(static_cast<double>(fp[i])));
    }
    a.values += static_cast<double>(f.numel());
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t cf = row_argmax(fp + i * cols, cols), cq = row_argmax(qp + i * cols, cols);
      a.agree += cf == cq;
      if (labels.defined()) {
        if (a.samples + i >= labels.numel())
          throw Error(o.labels + ": holds " + std::to_string(labels.numel()) +
                      " labels, the inputs have more rows");
        const std::int64_t want = labels.dtype() == DType::i64
                                      ? labels.data_as<std::int64_t>()[a.samples + i]
                                      : labels.data_as<std::int32_t>()[a.samples + i];
        a.correct_float += cf == want;
        a.correct_int8 += cq == want;
      }
    }
    a.samples += rows;
  }
  comparing.clear();

  const auto quantized_layers =
      std::count_if(r.layers.begin(), r.layers.end(), [](const auto& l) { return l.quantized; });
  for (const auto& l : r.layers)
    if (!l.quantized)
      std::fprintf(stderr, "warning: %s '%s' kept in float: %s\n", l.op.c_str(), l.node.c_str(),
                   l.reason.c_str());
  const double mean_error = a.values > 0 ? a.sum_error / a.values : 0;
  const std::string source = o.dataset         ? o.dataset->eval_source
                             : !o.eval.empty() ? "the --eval inputs"
                             : o.calib.empty() ? "seeded random N(0, 1) inputs (no --calib given)"
                                               : "the --calib inputs";
  if (o.json) {
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const auto& l : r.layers)
      layers.push_back({{"node", l.node},
                        {"op", l.op},
                        {"k", l.k},
                        {"n", l.n},
                        {"weight_error", l.weight_error},
                        {"quantized", l.quantized},
                        {"reason", l.reason}});
    nlohmann::ordered_json activations = nlohmann::ordered_json::array();
    for (const auto& v : r.activations)
      activations.push_back(
          {{"value", v.value}, {"lo", v.lo}, {"hi", v.hi}, {"scale", v.scale}, {"zero_point", v.zero_point}});
    nlohmann::ordered_json j = {{"input", shown},
                                {"output", o.output},
                                {"mode", o.mode},
                                {"layers", layers},
                                {"bytes_in", r.bytes_in},
                                {"bytes_out", r.bytes_out},
                                {"samples", a.samples},
                                {"inputs", o.dataset         ? "dataset"
                                           : !o.eval.empty() ? "eval"
                                           : o.calib.empty() ? "random"
                                                             : "calib"},
                                {"activations", activations},
                                {"folded_batch_norms", r.folded_batch_norms},
                                {"max_abs_error", a.max_error},
                                {"mean_abs_error", mean_error},
                                {"output_scale", a.scale}};
    if (a.classes) j["top1_agreement"] = static_cast<double>(a.agree) / static_cast<double>(a.samples);
    if (labels.defined()) {
      j["fp32_accuracy"] = static_cast<double>(a.correct_float) / static_cast<double>(a.samples);
      j[kind + "_accuracy"] = static_cast<double>(a.correct_int8) / static_cast<double>(a.samples);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-32s %-7s %-14s %-13s %s\n", "layer", "op", "K x N", "weight error", "result");
  for (const auto& l : r.layers) {
    const std::string kn = std::to_string(l.k) + " x " + std::to_string(l.n);
    std::printf("%-32s %-7s %-14s %-13.5f %s\n", l.node.c_str(), l.op.c_str(), kn.c_str(), l.weight_error,
                l.quantized ? kind.c_str() : "float");
  }
  std::printf("%s -> %s: %zd of %zu layers %s, %.2f MB -> %.2f MB\n", shown.c_str(), o.output.c_str(),
              static_cast<std::ptrdiff_t>(quantized_layers), r.layers.size(), kind.c_str(),
              static_cast<double>(r.bytes_in) / 1e6, static_cast<double>(r.bytes_out) / 1e6);
  if (r.folded_batch_norms > 0)
    std::printf("%d BatchNormalization node(s) folded into the Conv before them, then quantised\n",
                r.folded_batch_norms);
  if (!r.activations.empty()) {
    std::int64_t calibrated = 0;
    for (const auto& [name, x] : calib) calibrated += x.dim() >= 1 ? x.shape()[0] : 1;
    std::printf("%zu activations calibrated (%s observer) on %lld samples%s\n", r.activations.size(),
                o.observer.c_str(), static_cast<long long>(calibrated),
                o.dataset ? (" of " + o.dataset->calib_source).c_str() : "");
  }
  if (o.mode == "bf16")
    std::printf("%s\n", onednn::bf16_compute_available()
                            ? "the bf16 model computes in bf16 here (AMX or AVX512-BF16), as cpudl run will"
                            : "no bf16 units here: the bf16 model computes in f32 on its rounded weights");
  std::printf("on %lld samples of %s:\n", static_cast<long long>(a.samples), source.c_str());
  if (a.classes)
    std::printf("  top-1 agreement with the float model: %.2f%%\n",
                100.0 * static_cast<double>(a.agree) / static_cast<double>(a.samples));
  std::printf("  output error: max %.3g, mean %.3g (largest float output %.3g)\n", a.max_error, mean_error,
              a.scale);
  if (labels.defined()) {
    const double f = 100.0 * static_cast<double>(a.correct_float) / static_cast<double>(a.samples);
    const double q = 100.0 * static_cast<double>(a.correct_int8) / static_cast<double>(a.samples);
    std::printf("  top-1 accuracy: float %.2f%%, %s %.2f%% (%+.2f points)\n", f, kind.c_str(), q, q - f);
  }
  return 0;
}

}  // namespace cpudl::cli
