// The model zoo. Parameter names equal those of the PyTorch definitions (the tutorial's
// SimpleCNN, the classic LeNet-5, torchvision's ResNet-18), so weights move both ways unchanged.
#include <cmath>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/nn.h"

namespace cpudl::nn {
namespace {

class SimpleCnn : public Module {
 public:
  SimpleCnn(std::int64_t in_channels, std::int64_t classes) {
    conv1 = register_module("conv1", std::make_shared<Conv2d>(in_channels, 32, 3));
    fc = register_module("fc", std::make_shared<Linear>(32 * 26 * 26, classes));
  }
  // One fused op (ops.h: conv2d_relu_linear): the 32 x 26 x 26 activation stays in cache.
  Tensor forward(const Tensor& x) override {
    return conv2d_relu_linear(x, conv1->weight, conv1->bias, conv1->options, fc->weight, fc->bias);
  }
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<Linear> fc;
};

class LeNet5 : public Module {
 public:
  LeNet5(std::int64_t in_channels, std::int64_t classes) {
    conv1 = register_module("conv1", std::make_shared<Conv2d>(in_channels, 6, 5, 1, 2));
    conv2 = register_module("conv2", std::make_shared<Conv2d>(6, 16, 5));
    fc1 = register_module("fc1", std::make_shared<Linear>(16 * 5 * 5, 120));
    fc2 = register_module("fc2", std::make_shared<Linear>(120, 84));
    fc3 = register_module("fc3", std::make_shared<Linear>(84, classes));
  }
  // relu(max_pool(conv)) is max_pool(relu(conv)), values and gradients (ReLU is monotonic: the
  // same window element wins, and its gradient passes iff it is > 0), so the ReLU and its mask
  // run on the pooled tensor, a quarter of the convolution's output (LeNet-5 training, 1 thread,
  // three alternating runs: 25.3-26.3K -> 26.5-27.2K images/s).
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(max_pool2d(conv1->forward(x), 2));
    h = relu(max_pool2d(conv2->forward(h), 2)).flatten(1);
    return fc3->forward(fc2->forward_relu(fc1->forward_relu(h)));
  }
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<Linear> fc1, fc2, fc3;
};

class Mlp : public Module {
 public:
  Mlp(std::int64_t inputs, std::int64_t classes) {
    fc1 = register_module("fc1", std::make_shared<Linear>(inputs, 1024));
    fc2 = register_module("fc2", std::make_shared<Linear>(1024, 1024));
    fc3 = register_module("fc3", std::make_shared<Linear>(1024, classes));
  }
  Tensor forward(const Tensor& x) override {
    return fc3->forward(fc2->forward_relu(fc1->forward_relu(x.flatten(1))));
  }
  std::shared_ptr<Linear> fc1, fc2, fc3;
};

// torchvision initialises ResNet convolutions with kaiming_normal(fan_out, relu).
void kaiming_normal_fan_out(Conv2d& conv) {
  const Tensor& w = conv.weight;
  const float std = std::sqrt(2.0f / static_cast<float>(w.size(0) * w.size(2) * w.size(3)));
  Tensor fresh = mul(Tensor::randn(w.shape()), std);
  std::copy(fresh.data(), fresh.data() + fresh.numel(), w.data());
}

std::shared_ptr<Conv2d> resnet_conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride,
                                    std::int64_t pad) {
  auto c = std::make_shared<Conv2d>(in, out, k, stride, pad, /*bias=*/false);
  kaiming_normal_fan_out(*c);
  return c;
}

class BasicBlock : public Module {
 public:
  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride) {
    conv1 = register_module("conv1", resnet_conv(in, out, 3, stride, 1));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out));
    conv2 = register_module("conv2", resnet_conv(out, out, 3, 1, 1));
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample", std::make_shared<Sequential>(std::vector<ModulePtr>{
                            resnet_conv(in, out, 1, stride, 0), std::make_shared<BatchNorm2d>(out)}));
    }
  }
  Tensor forward(const Tensor& x) override {
    if (checkpointed_) return autograd::checkpoint([this](const Tensor& in) { return block(in); }, x);
    return block(x);
  }
  bool checkpoint_activations(bool on) override {
    checkpointed_ = on;
    return true;
  }
  Tensor block(const Tensor& x) {
    Tensor out = bn1->forward_relu(conv1->forward(x));
    out = bn2->forward(conv2->forward(out));
    return add_relu(out, downsample ? downsample->forward(x) : x);
  }
  bool checkpointed_ = false;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> downsample;
};

class ResNet18 : public Module {
 public:
  ResNet18(std::int64_t in_channels, std::int64_t classes, bool cifar_stem) : cifar_stem_(cifar_stem) {
    conv1 = register_module(
        "conv1", cifar_stem ? resnet_conv(in_channels, 64, 3, 1, 1) : resnet_conv(in_channels, 64, 7, 2, 3));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
    const std::int64_t widths[] = {64, 128, 256, 512};
    std::int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      const std::int64_t stride = i == 0 ? 1 : 2;
      layers[i] = register_module("layer" + std::to_string(i + 1),
                                  std::make_shared<Sequential>(std::vector<ModulePtr>{
                                      std::make_shared<BasicBlock>(in, widths[i], stride),
                                      std::make_shared<BasicBlock>(widths[i], widths[i], 1)}));
      in = widths[i];
    }
    fc = register_module("fc", std::make_shared<Linear>(512, classes));
  }
  Tensor forward(const Tensor& x) override {
    const auto stem = [this](const Tensor& in) {
      Tensor h = bn1->forward_relu(conv1->forward(in));
      return cifar_stem_ ? h : max_pool2d(h, 3, 2, 1);
    };
    Tensor h = checkpointed_ ? autograd::checkpoint(stem, x) : stem(x);
    for (auto& layer : layers) h = layer->forward(h);
    return fc->forward(adaptive_avg_pool2d(h, 1, 1).flatten(1));
  }
  // Segments: the stem and the residual blocks of the first two stages. Each stage costs about
  // the same FLOPs, but activations halve from one stage to the next: recomputing layer3 and
  // layer4 would add half the extra forward to save an eighth of the memory, and the peak (the
  // stem's backward) would not move (measured in docs/DISTRIBUTED.md, "Memory").
  bool checkpoint_activations(bool on) override {
    checkpointed_ = on;
    for (int i = 0; i < 4; ++i) layers[i]->checkpoint_activations(on && i < 2);
    return true;
  }
  bool checkpointed_ = false;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layers[4];
  std::shared_ptr<Linear> fc;

 private:
  bool cifar_stem_;
};

}  // namespace

std::vector<std::string> model_names() { return {"simplecnn", "lenet5", "mlp", "resnet18"}; }

ModulePtr make_model(const std::string& name, std::int64_t classes, std::int64_t in_channels, bool cifar_stem,
                     std::int64_t mlp_inputs) {
  if (name == "simplecnn") return std::make_shared<SimpleCnn>(in_channels, classes);
  if (name == "lenet5") return std::make_shared<LeNet5>(in_channels, classes);
  if (name == "mlp")
    return std::make_shared<Mlp>(mlp_inputs > 0 ? mlp_inputs : in_channels * 28 * 28, classes);
  if (name == "resnet18") return std::make_shared<ResNet18>(in_channels, classes, cifar_stem);
  throw UsageError("unknown model '" + name + "' (expected simplecnn, lenet5, mlp or resnet18)");
}

}  // namespace cpudl::nn
