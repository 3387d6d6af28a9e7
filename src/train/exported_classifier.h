// A classifier cpudl export wrote to ONNX, read as eval, predict and serve read the model file it
// came from: its metadata_props carry the file's metadata under "cpudl." keys (input
// normalisation, class names), its one input [batch, ...] the sample shape, its one output
// [batch, classes] the classes; the graph runs on cpudl's ONNX runtime behind nn::Module.
#pragma once

#include <string>

#include "cpudl/inference.h"
#include "train/trainer.h"

namespace cpudl::train {

// Whether the session's metadata says how inputs are normalised (what cpudl export writes).
bool is_exported_classifier(const InferenceSession& session);
// Every ModelFile field but `model`; Error naming `path` when the metadata or shapes are not those
// of an exported classifier.
ModelFile exported_classifier_info(const InferenceSession& session, const std::string& path);
// A cpudl model file (or checkpoint), or an ONNX file cpudl export wrote, by the file's content.
ModelFile load_classifier(const std::string& path);

}  // namespace cpudl::train
