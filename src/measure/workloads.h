// The shapes cpudl is measured on: square and real-layer GEMMs, and the convolutions of the
// zoo models (ResNet-18 at 224x224, LeNet-5 and the tutorial's SimpleCNN on 28x28 MNIST).
#pragma once

#include <string>
#include <vector>

#include "dense/onednn/dense.h"

namespace cpudl::bench {

struct GemmWorkload {
  std::string label;  // "square" or the layer it comes from
  std::int64_t m, n, k;
};
std::vector<GemmWorkload> gemm_workloads(const std::vector<std::int64_t>& square_sizes);

struct ConvWorkload {
  std::string model, layer;
  onednn::ConvShape shape;
  // Whether the layer has a bias, as the model defines it: ResNet-18's convolutions have none
  // (batch norm follows, as in torchvision), LeNet-5's and SimpleCNN's do. The bias is a real
  // cost in backward-weights (a reduction of dy over batch and space), so it is measured only
  // where the model pays it.
  bool bias;
};
// model: "resnet18", "lenet5", "simplecnn" or "all"; batch 0 = the model's default (16 for
// resnet18, 256 for the MNIST models). Throws UsageError for an unknown model.
std::vector<ConvWorkload> conv_workloads(const std::string& model, std::int64_t batch);

}  // namespace cpudl::bench
