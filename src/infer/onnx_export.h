// cpudl's own models as ONNX files (`cpudl export`): the graph each zoo architecture's forward
// computes in evaluation mode (batch normalisation from its running statistics), opset 17, with
// the batch dimension free. The weights keep their PyTorch names as initializers, and the model's
// input normalisation travels in metadata_props (cpudl.normalization_mean/std), as PyTorch's
// exporter leaves preprocessing to the caller: the graph takes the normalised tensor.
//
// Written per architecture rather than traced: the zoo is four fixed networks, and a recipe per
// network states its ONNX form in a dozen lines. The tests hold each recipe to the eager forward
// (and to ONNX Runtime where it is installed), so a recipe that drifts from its model fails.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "cpudl/nn.h"
#include "cpudl/tensor.h"

namespace cpudl::infer {

struct ZooModel {
  std::string architecture;  // simplecnn, lenet5, mlp, resnet18
  nn::NamedTensors weights;  // its state dict
  Shape input_shape;         // one sample's
  std::int64_t classes = 0;
  std::map<std::string, std::string> metadata;  // copied into metadata_props with a "cpudl." prefix
};

// The serialised ModelProto. Error naming the tensor when a weight is missing or misshapen, and
// the architecture when it has no recipe.
std::string export_zoo_onnx(const ZooModel& model, const std::string& producer_version);

}  // namespace cpudl::infer
