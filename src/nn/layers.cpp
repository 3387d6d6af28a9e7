// The standard layers, initialised exactly as PyTorch 1.13 does (so that results are comparable):
// Linear and Conv2d weights kaiming_uniform(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); Embedding N(0, 1); norms 1 and 0.
#include <cmath>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/nn.h"

namespace cpudl::nn {

namespace {
Tensor uniform(const Shape& shape, float bound) {
  Tensor t = Tensor::rand(shape);
  float* p = t.data();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = (2.0f * p[i] - 1.0f) * bound;
  return t;
}
}  // namespace

Linear::Linear(std::int64_t in, std::int64_t out, bool has_bias) {
  if (in < 1 || out < 1)
    throw Error("Linear(" + std::to_string(in) + ", " + std::to_string(out) + "): sizes must be positive");
  const float bound = 1.0f / std::sqrt(static_cast<float>(in));
  weight = register_parameter("weight", uniform({out, in}, bound));
  if (has_bias) bias = register_parameter("bias", uniform({out}, bound));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }
Tensor Linear::forward_relu(const Tensor& x) { return linear_relu(x, weight, bias); }

Conv2d::Conv2d(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
               std::int64_t padding, bool has_bias, std::int64_t dilation, std::int64_t groups) {
  if (in < 1 || out < 1 || kernel < 1 || groups < 1 || in % groups || out % groups)
    throw Error("Conv2d(" + std::to_string(in) + ", " + std::to_string(out) + ", kernel " +
                std::to_string(kernel) + ", groups " + std::to_string(groups) + "): invalid configuration");
  options = Conv2dOptions{stride, stride, padding, padding, dilation, dilation, groups};
  const float bound = 1.0f / std::sqrt(static_cast<float>(in / groups * kernel * kernel));
  weight = register_parameter("weight", uniform({out, in / groups, kernel, kernel}, bound));
  if (has_bias) bias = register_parameter("bias", uniform({out}, bound));
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options); }
Tensor Conv2d::forward_relu(const Tensor& x) {
  Conv2dOptions fused = options;
  fused.relu = true;
  return conv2d(x, weight, bias, fused);
}

BatchNorm2d::BatchNorm2d(std::int64_t channels, float eps, float momentum) : eps(eps), momentum(momentum) {
  weight = register_parameter("weight", Tensor::ones({channels}));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var = register_buffer("running_var", Tensor::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
}

Tensor BatchNorm2d::forward(const Tensor& x) { return run(x, false); }
Tensor BatchNorm2d::forward_relu(const Tensor& x) { return run(x, true); }

Tensor BatchNorm2d::run(const Tensor& x, bool relu) {
  // A checkpoint's recomputation normalises the same batch again: its statistics were already
  // folded into the running ones by the first forward.
  const bool update = is_training() && !autograd::recomputing();
  if (update) {
    ++num_batches_tracked.data_as<std::int64_t>()[0];
    num_batches_tracked.bump_version();
  }
  const bool skip = is_training() && !update;  // inference reads them; a recomputation leaves them
  return batch_norm2d(x, skip ? Tensor() : running_mean, skip ? Tensor() : running_var, weight, bias,
                      is_training(), momentum, eps, relu);
}

LayerNorm::LayerNorm(const Shape& normalized_shape, float eps) : eps(eps) {
  weight = register_parameter("weight", Tensor::ones(normalized_shape));
  bias = register_parameter("bias", Tensor::zeros(normalized_shape));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight.dim(), weight, bias, eps); }

Embedding::Embedding(std::int64_t num, std::int64_t dim) {
  weight = register_parameter("weight", Tensor::randn({num, dim}));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight); }

}  // namespace cpudl::nn
