// Benchmark shapes, taken from the layers of the networks users train and run.
#include "measure/workloads.h"

#include "cpudl/error.h"

namespace cpudl::bench {

std::vector<GemmWorkload> gemm_workloads(const std::vector<std::int64_t>& square_sizes) {
  std::vector<GemmWorkload> out;
  for (std::int64_t s : square_sizes) out.push_back({"square", s, s, s});
  // Skinny shapes of real layers (m = batch or tokens).
  out.push_back({"simplecnn fc (batch 256)", 256, 10, 21632});
  out.push_back({"lenet5 fc1 (batch 256)", 256, 120, 400});
  out.push_back({"mlp 784-1024 (batch 64)", 64, 1024, 784});
  out.push_back({"resnet18 fc (batch 16)", 16, 1000, 512});
  out.push_back({"bert-base ffn (128 tokens)", 128, 3072, 768});
  return out;
}

namespace {

onednn::ConvShape conv(std::int64_t batch, std::int64_t c, std::int64_t hw, std::int64_t oc, std::int64_t k,
                       std::int64_t stride, std::int64_t pad) {
  onednn::ConvShape s;
  s.batch = batch, s.in_channels = c, s.height = s.width = hw, s.out_channels = oc;
  s.kernel_h = s.kernel_w = k, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad;
  s.layout = onednn::ActivationLayout::nhwc;  // channels-last: what oneDNN's fastest kernels read
  return s;
}

}  // namespace

std::vector<ConvWorkload> conv_workloads(const std::string& model, std::int64_t batch) {
  if (model != "all" && model != "resnet18" && model != "lenet5" && model != "simplecnn")
    throw UsageError("--model " + model + ": expected resnet18, lenet5, simplecnn or all");
  std::vector<ConvWorkload> out;
  if (model == "all" || model == "resnet18") {
    const std::int64_t n = batch > 0 ? batch : 16;
    out.push_back({"resnet18", "conv1 7x7/2", conv(n, 3, 224, 64, 7, 2, 3), false});
    out.push_back({"resnet18", "layer1 3x3 64", conv(n, 64, 56, 64, 3, 1, 1), false});
    out.push_back({"resnet18", "layer2.0 3x3/2 64-128", conv(n, 64, 56, 128, 3, 2, 1), false});
    out.push_back({"resnet18", "layer2 3x3 128", conv(n, 128, 28, 128, 3, 1, 1), false});
    out.push_back({"resnet18", "layer2 down 1x1/2", conv(n, 64, 56, 128, 1, 2, 0), false});
    out.push_back({"resnet18", "layer3.0 3x3/2 128-256", conv(n, 128, 28, 256, 3, 2, 1), false});
    out.push_back({"resnet18", "layer3 3x3 256", conv(n, 256, 14, 256, 3, 1, 1), false});
    out.push_back({"resnet18", "layer3 down 1x1/2", conv(n, 128, 28, 256, 1, 2, 0), false});
    out.push_back({"resnet18", "layer4.0 3x3/2 256-512", conv(n, 256, 14, 512, 3, 2, 1), false});
    out.push_back({"resnet18", "layer4 3x3 512", conv(n, 512, 7, 512, 3, 1, 1), false});
    out.push_back({"resnet18", "layer4 down 1x1/2", conv(n, 256, 14, 512, 1, 2, 0), false});
  }
  if (model == "all" || model == "lenet5") {
    const std::int64_t n = batch > 0 ? batch : 256;
    out.push_back({"lenet5", "conv1 5x5 1-6", conv(n, 1, 28, 6, 5, 1, 2), true});
    out.push_back({"lenet5", "conv2 5x5 6-16", conv(n, 6, 14, 16, 5, 1, 0), true});
  }
  if (model == "all" || model == "simplecnn") {
    const std::int64_t n = batch > 0 ? batch : 256;
    out.push_back({"simplecnn", "conv1 3x3 1-32", conv(n, 1, 28, 32, 3, 1, 0), true});
  }
  return out;
}

}  // namespace cpudl::bench
