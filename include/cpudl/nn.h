// Neural-network modules, as torch.nn: parameters and buffers registered by name (so state
// dicts use PyTorch's keys), train/eval modes, PyTorch's default initialisation.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cpudl/ops.h"
#include "cpudl/tensor.h"

namespace cpudl::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  NamedTensors named_parameters() const;  // "conv1.weight", "layer1.0.bn1.bias", ...
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  // Parameters and buffers, in registration order (PyTorch's state_dict order).
  NamedTensors state_dict() const;
  // Copies values into the module's tensors. Strict: missing, unexpected and mis-shaped entries
  // are one Error that lists all of them.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  std::int64_t parameter_count() const;
  // Activation checkpointing (autograd::checkpoint) over the model's segments (a ResNet's stem and
  // first two stages' residual blocks): in training, each keeps only its input and recomputes its activations
  // in backward. Returns false, changing nothing, for a model without segments worth recomputing.
  virtual bool checkpoint_activations(bool /*on*/) { return false; }

 protected:
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out, bool parameters, bool buffers) const;
  NamedTensors parameters_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

class Linear : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x);  // relu(forward(x)), fused (linear_relu)
  Tensor weight, bias;
};

class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride = 1,
         std::int64_t padding = 0, bool bias = true, std::int64_t dilation = 1, std::int64_t groups = 1);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x);  // relu(forward(x)), fused (Conv2dOptions::relu)
  Tensor weight, bias;
  Conv2dOptions options;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one pass over memory each way (batch_norm2d's relu).
  Tensor forward_relu(const Tensor& x);
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  float eps, momentum;

 private:
  Tensor run(const Tensor& x, bool relu);
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(const Shape& normalized_shape, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  float eps;
};

class Embedding : public Module {
 public:
  Embedding(std::int64_t num, std::int64_t dim);
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
};

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f) : p(p) {}
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  float p;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
};

class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1) : start_dim(start_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim); }
  std::int64_t start_dim;
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0)
      : kernel(kernel), stride(stride), padding(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel, stride, padding); }
  std::int64_t kernel, stride, padding;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(std::int64_t h, std::int64_t w) : h(h), w(w) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, h, w); }
  std::int64_t h, w;
};

// Children named "0", "1", ... as torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> modules);
  void push_back(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::size_t size() const { return modules_.size(); }
  // Passed to each module: true when any of them has segments.
  bool checkpoint_activations(bool on) override;

 private:
  std::vector<ModulePtr> modules_;
};

// ---- model zoo, with torchvision/PyTorch tutorial parameter names
// simplecnn: conv1 = Conv2d(1, 32, 3), ReLU, Flatten, fc = Linear(32*26*26, 10) (28x28 inputs).
// lenet5: conv1 6@5x5 pad 2, ReLU, max-pool 2, conv2 16@5x5, ReLU, max-pool 2, fc1 120, fc2 84, fc3 10.
// mlp: fc1 784-1024, fc2 1024-1024, fc3 1024-10 with ReLU (input flattened).
// resnet18: torchvision's, with `cifar_stem` = 3x3 stride-1 conv1 and no max-pool.
// mlp_inputs: the mlp's input features (0 = in_channels * 28 * 28).
ModulePtr make_model(const std::string& name, std::int64_t num_classes = 10, std::int64_t in_channels = 1,
                     bool cifar_stem = true, std::int64_t mlp_inputs = 0);
std::vector<std::string> model_names();

}  // namespace cpudl::nn
