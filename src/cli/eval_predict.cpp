// `cpudl eval` (accuracy, loss, confusion matrix of a model file on a dataset) and
// `cpudl predict` (top-k classes of images), both from the model file's own metadata.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/train_monitor.h"
#include "cli/usage_errors.h"
#include "cpudl/autograd.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "train/exported_classifier.h"
#include "train/trainer.h"

namespace cpudl::cli {
namespace {

struct EvalOptions {
  std::string model, data, report;
  bool json = false;
  int threads = 0;
};

int run_eval(const EvalOptions& o) {
  if (!o.report.empty()) check_report_path(o.report);    // before the work, not after it
  train::ModelFile m = train::load_classifier(o.model);  // a cpudl model or its ONNX export
  const data::Dataset test = data::load_dataset(o.data, false, m.input_shape);  // image folders: resized
  if (!test.class_names.empty() && test.class_names != m.labels) {
    std::string names;
    for (const std::string& n : m.labels) names += (names.empty() ? "" : ", ") + n;
    throw Error(o.data + ": its class folders are not the classes " + o.model + " was trained on (" + names +
                ")");
  }
  Shape sample(test.images.shape().begin() + 1, test.images.shape().end());
  if (sample != m.input_shape)
    throw Error(o.data + ": samples are " + shape_text(sample) + ", the model " + o.model + " takes " +
                shape_text(m.input_shape));
  Progress progress("eval " + o.data, test.images.size(0), !o.json);
  const train::Evaluation e =
      train::evaluate(*m.model, test, m.classes, 250, o.report.empty() ? 0 : 16,
                      [&](std::int64_t done, std::int64_t) { progress.update(done); });
  progress.clear();
  if (!o.report.empty())
    io::write_file_atomically(o.report, evaluation_report_html(o.model + " on " + o.data, test, e));
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"accuracy", e.accuracy},
                                               {"loss", e.loss},
                                               {"samples", test.images.size(0)},
                                               {"confusion", e.confusion}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf(
      "%s on %s: accuracy %.2f%% (%lld samples), loss %.4f\n\nconfusion (rows: true class, columns: "
      "predicted)\n      ",
      o.model.c_str(), o.data.c_str(), 100 * e.accuracy, static_cast<long long>(test.images.size(0)), e.loss);
  for (std::size_t j = 0; j < e.confusion.size(); ++j) std::printf("%6zu", j);
  std::printf("\n");
  for (std::size_t i = 0; i < e.confusion.size(); ++i) {
    std::printf("%6zu", i);
    for (std::int64_t v : e.confusion[i]) std::printf("%6lld", static_cast<long long>(v));
    std::printf("\n");
  }
  return 0;
}

struct PredictOptions {
  std::string model;
  std::vector<std::string> inputs;
  int top = 3;
  bool json = false, ascii = false, invert = false;
  int threads = 0;
};

// A grey image whose brightness is on the other side of the middle from the training images'
// (metadata pixel_mean): most likely a digit drawn dark on light for a model of light on dark.
void warn_if_polarity_differs(const train::ModelFile& m, const Tensor& image, const std::string& what) {
  const auto it = m.metadata.find("pixel_mean");
  if (it == m.metadata.end() || image.size(0) != 1) return;
  const double trained = std::atof(it->second.c_str());
  double sum = 0;
  for (std::int64_t i = 0; i < image.numel(); ++i) sum += image.data()[i];
  const double mean = sum / static_cast<double>(image.numel());
  if ((mean < 0.5) == (trained < 0.5)) return;
  std::fprintf(
      stderr,
      "cpudl: warning: %s is mostly %s (mean %.2f), the model's training images mostly %s (mean %.2f): "
      "if it is drawn the other way round, --invert\n",
      what.c_str(), mean < 0.5 ? "dark" : "light", mean, trained < 0.5 ? "dark" : "light", trained);
}

// An input as [C, H, W] in [0, 1]: an image file, or idx:FILE:INDEX (one sample of an IDX file).
Tensor read_input(const std::string& spec) {
  if (spec.rfind("idx:", 0) == 0) {
    const auto colon = spec.rfind(':');
    if (colon <= 4) throw UsageError(spec + ": expected idx:FILE:INDEX");
    const std::string file = spec.substr(4, colon - 4);
    char* end = nullptr;
    const long long index = std::strtoll(spec.c_str() + colon + 1, &end, 10);
    if (*end || index < 0) throw UsageError(spec + ": INDEX must be a non-negative integer");
    const data::IdxArray a = data::read_idx(file);
    if (a.dims.size() != 3) throw Error(file + ": expected an IDX image file (3 dimensions)");
    if (index >= a.dims[0])
      throw Error(spec + ": index out of range (" + std::to_string(a.dims[0]) + " images)");
    const std::int64_t h = a.dims[1], w = a.dims[2];
    Tensor t = Tensor::empty({1, h, w});
    for (std::int64_t i = 0; i < h * w; ++i)
      t.data()[i] = a.values[static_cast<std::size_t>(index * h * w + i)] / 255.0f;
    return t;
  }
  return data::read_image(spec);
}

void print_ascii(const Tensor& img) {
  static const char* shades = " .:-=+*#%@";
  const std::int64_t h = img.size(1), w = img.size(2);
  for (std::int64_t y = 0; y < h; y += 2) {  // two rows per line: characters are tall
    std::printf("    ");
    for (std::int64_t x = 0; x < w; ++x) {
      const float v = (img.at({0, y, x}) + (y + 1 < h ? img.at({0, y + 1, x}) : 0)) / 2;
      std::putchar(shades[std::min(9, static_cast<int>(v * 10))]);
    }
    std::printf("\n");
  }
}

// The inputs with each directory replaced by the images under it (an image folder's class
// folders included), in sorted order.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const std::string& spec : inputs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(spec, ec)) {
      out.push_back(spec);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::recursive_directory_iterator(spec, ec))
      if (e.is_regular_file() && data::is_image_file(e.path())) found.push_back(e.path().string());
    if (found.empty()) throw Error(spec + ": a directory with no images (.png, .jpg, .jpeg, .pgm) in it");
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

int run_predict(const PredictOptions& o) {
  train::ModelFile m = train::load_classifier(o.model);  // a cpudl model or its ONNX export
  NoGradGuard no_grad;
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  int failed = 0;
  const std::vector<std::string> inputs = expand_inputs(o.inputs);
  for (const std::string& spec : inputs) {
    // One bad file is reported and the others still predicted; the exit code says some failed.
    Tensor x;
    try {
      Tensor image = read_input(spec);
      if (o.invert)
        for (std::int64_t i = 0; i < image.numel(); ++i) image.data()[i] = 1.0f - image.data()[i];
      else
        warn_if_polarity_differs(m, image, spec);
      x = train::prepare_image(m, image, spec);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      std::fprintf(stderr, "cpudl: error: %s\n", e.what());
      ++failed;
      if (o.json) all.push_back({{"input", spec}, {"error", e.what()}});
      continue;
    }
    const Tensor probs = softmax(m.model->forward(x.unsqueeze(0)), 1);
    std::vector<std::pair<float, int>> ranked;
    for (int k = 0; k < probs.size(1); ++k) ranked.emplace_back(probs.at({0, k}), k);
    std::sort(ranked.begin(), ranked.end(), std::greater<>());
    ranked.resize(static_cast<std::size_t>(std::min<int>(o.top, static_cast<int>(ranked.size()))));
    if (o.json) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (auto [p, k] : ranked)
        top.push_back({{"class", k}, {"label", m.labels[static_cast<std::size_t>(k)]}, {"probability", p}});
      all.push_back({{"input", spec}, {"top", top}});
      continue;
    }
    if (o.ascii && x.size(0) == 1) {  // the grey image the model saw, un-normalised
      Tensor img = Tensor::empty(x.shape());
      for (std::int64_t i = 0; i < x.numel(); ++i) img.data()[i] = x.data()[i] * m.std[0] + m.mean[0];
      print_ascii(img);
    }
    std::printf("%s:", spec.c_str());
    for (auto [p, k] : ranked)
      std::printf("  %s (%.1f%%)", m.labels[static_cast<std::size_t>(k)].c_str(), 100 * p);
    std::printf("\n");
  }
  if (o.json) std::printf("%s\n", all.dump().c_str());
  if (failed > 0) {
    std::fprintf(stderr, "cpudl: error: %d of %zu inputs could not be predicted\n", failed, inputs.size());
    return 1;
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* e = app.add_subcommand(
      "eval", "Accuracy, loss and confusion matrix of a model file on a dataset's test split");
  e->add_option("--model", o->model, "Model file written by cpudl train")->required();
  e->add_option("--data", o->data, "Data directory (as for train)")->required();
  e->add_flag("--json", o->json, "One JSON object");
  e->add_option("--report", o->report,
                "Also write one self-contained HTML page: the confusion matrix as a heat map and the "
                "worst-classified samples, drawn");
  add_threads_option(e, o->threads);
  e->callback([&action, o] {
    action = [o] {
      use_threads(o->threads);
      return run_eval(*o);
    };
  });
}

void add_predict_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* p = app.add_subcommand("predict", "Top classes of images (PNG, JPEG, PGM, or idx:FILE:INDEX)");
  p->add_option("--model", o->model, "Model file written by cpudl train")->required();
  p->add_option("inputs", o->inputs, "Images: PNG, JPEG or PGM files (any size: resized), or idx:FILE:INDEX")
      ->required();
  p->add_option("--top", o->top, "Classes to show (default 3)")->check(in_range(1, 1000));
  p->add_flag("--ascii", o->ascii, "Draw each grey image as ASCII art beside its prediction");
  p->add_flag("--invert", o->invert,
              "Invert grey levels first (a digit drawn dark on light for a model of light on dark)");
  p->add_flag("--json", o->json, "One JSON array");
  add_threads_option(p, o->threads);
  p->callback([&action, o] {
    action = [o] {
      use_threads(o->threads);
      return run_predict(*o);
    };
  });
}

}  // namespace cpudl::cli
