#include "train/exported_classifier.h"

#include "cpudl/error.h"
#include "io/file_kind.h"
#include "io/metadata_lists.h"

namespace cpudl::train {
namespace {

class OnnxClassifier : public nn::Module {
 public:
  explicit OnnxClassifier(const std::string& path) : session_(path) {}
  Tensor forward(const Tensor& x) override { return session_.run({x.contiguous()}).at(0); }
  InferenceSession& session() { return session_; }

 private:
  InferenceSession session_;
};

}  // namespace

bool is_exported_classifier(const InferenceSession& session) {
  const auto& md = session.metadata();
  return md.count("cpudl.normalization_mean") && md.count("cpudl.normalization_std");
}

ModelFile exported_classifier_info(const InferenceSession& s, const std::string& path) {
  if (!is_exported_classifier(s))
    throw Error(path +
                ": an ONNX model that does not say how its inputs are normalised (metadata_props "
                "cpudl.normalization_mean/std, which cpudl export writes): give its tensors to cpudl run");
  if (s.inputs().size() != 1 || s.inputs()[0].shape.size() < 2 || s.outputs().size() != 1)
    throw Error(path + ": expected one input [batch, ...] and one output [batch, classes]");
  const auto& md = s.metadata();
  ModelFile m;
  m.metadata = md;
  m.mean = io::parse_floats(md.at("cpudl.normalization_mean"), path + ": cpudl.normalization_mean");
  m.std = io::parse_floats(md.at("cpudl.normalization_std"), path + ": cpudl.normalization_std");
  if (m.mean.empty() || m.std.empty()) throw Error(path + ": cpudl.normalization_mean/std are empty");
  m.input_shape.assign(s.inputs()[0].shape.begin() + 1, s.inputs()[0].shape.end());
  const Shape& out = s.outputs()[0].shape;
  m.classes = out.size() == 2 && out[1] > 0 ? out[1] : 0;
  if (m.classes <= 0) throw Error(path + ": its output is not [batch, classes]");
  if (const auto names = md.find("cpudl.class_names"); names != md.end())
    m.metadata["class_names"] = names->second;
  m.labels = class_labels(m.metadata, m.classes, path);
  return m;
}

ModelFile load_classifier(const std::string& path) {
  if (io::file_kind(path) != io::FileKind::onnx) return load_model_file(path);
  auto model = std::make_shared<OnnxClassifier>(path);
  ModelFile m = exported_classifier_info(model->session(), path);
  m.model = model;
  return m;
}

}  // namespace cpudl::train
