// The model eval and predict run: a model cpudl train wrote (or its checkpoint), or an ONNX file
// cpudl export wrote, whose metadata_props carry what the model file's metadata does (input
// normalisation, class names); its graph then runs on cpudl's ONNX runtime behind nn::Module.
#include "cli/command.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/ops.h"
#include "io/file_kind.h"
#include "train/trainer.h"

namespace cpudl::cli {
namespace {

class OnnxClassifier : public nn::Module {
 public:
  explicit OnnxClassifier(const std::string& path) : session_(path) {}
  Tensor forward(const Tensor& x) override { return session_.run({x.contiguous()}).at(0); }
  InferenceSession& session() { return session_; }

 private:
  InferenceSession session_;
};

std::vector<float> floats(const std::string& text, const std::string& what) {
  std::vector<float> out;
  const char* p = text.c_str();
  for (char* end = nullptr;; p = end + 1) {
    out.push_back(std::strtof(p, &end));
    if (end == p) throw Error(what + " is not a list of numbers: " + text);
    if (*end != ',') break;
  }
  return out;
}

}  // namespace

train::ModelFile load_classifier(const std::string& path) {
  if (io::file_kind(path) != io::FileKind::onnx) return train::load_model_file(path);
  auto model = std::make_shared<OnnxClassifier>(path);
  InferenceSession& s = model->session();
  const auto& md = s.metadata();
  const auto mean = md.find("cpudl.normalization_mean"), stdev = md.find("cpudl.normalization_std");
  if (mean == md.end() || stdev == md.end())
    throw Error(path +
                ": an ONNX model that does not say how its inputs are normalised (metadata_props "
                "cpudl.normalization_mean/std, which cpudl export writes): give its tensors to cpudl run");
  if (s.inputs().size() != 1 || s.inputs()[0].shape.size() < 2 || s.outputs().size() != 1)
    throw Error(path + ": expected one input [batch, ...] and one output [batch, classes]");
  train::ModelFile m;
  m.metadata = md;
  m.mean = floats(mean->second, path + ": cpudl.normalization_mean");
  m.std = floats(stdev->second, path + ": cpudl.normalization_std");
  m.input_shape.assign(s.inputs()[0].shape.begin() + 1, s.inputs()[0].shape.end());
  const Shape& out = s.outputs()[0].shape;
  m.classes = out.size() == 2 && out[1] > 0 ? out[1] : 0;
  if (m.classes <= 0) throw Error(path + ": its output is not [batch, classes]");
  if (const auto names = md.find("cpudl.class_names"); names != md.end())
    m.metadata["class_names"] = names->second;
  m.labels = train::class_labels(m.metadata, m.classes, path);
  m.model = model;
  return m;
}

}  // namespace cpudl::cli
