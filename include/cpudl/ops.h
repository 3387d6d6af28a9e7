// Differentiable operations on tensors, as torch.* and torch.nn.functional: each is defined once
// (src/ops/), with its shape rule, forward on cpudl's kernels, and backward.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cpudl/runtime.h"
#include "cpudl/tensor.h"

namespace cpudl {

// forward_flops() and the per-op profile (op_profile()) are declared in cpudl/runtime.h.

// ---- element-wise, broadcasting (NumPy rules)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, float b);
Tensor mul(const Tensor& a, float b);
Tensor neg(const Tensor& a);
// In place, not differentiable (optimisers, gradient accumulation): a += b, broadcasting b.
void add_(const Tensor& a, const Tensor& b);

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, float exponent);
Tensor clamp(const Tensor& x, std::optional<float> min, std::optional<float> max);
Tensor relu(const Tensor& x);
// relu(add(a, b)) as one op (a residual block's join): one pass each way. Same shapes; others are
// run as the two ops.
Tensor add_relu(const Tensor& a, const Tensor& b);
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.01f);
Tensor gelu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& a, float b) { return mul(a, b); }
inline Tensor operator*(float a, const Tensor& b) { return mul(b, a); }
inline Tensor operator+(const Tensor& a, float b) { return add(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// ---- reductions (dims empty = all)
Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);     // values
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);  // i64 indices
// Sums a broadcast gradient back to `shape` (the inverse of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra
// Matrix product with batching: [.., m, k] x [.., k, n] (a 2-D operand broadcasts over batches).
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x W^T + b, W [out, in] as torch.nn.Linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, W, b)) as one op: the ReLU applied as y is written, its mask inside the backward.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- layers (NCHW activations and OIHW weights, as PyTorch)
struct Conv2dOptions {
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
  // relu(conv2d(...)) as one op: the ReLU applied as the output is stored, its mask (output > 0)
  // applied to the incoming gradient inside the backward pass; no separate pass over memory.
  bool relu = false;
};
// While an instance lives on this thread, convolutions and linear layers run in bf16 as under
// torch.autocast(device_type="cpu", dtype=torch.bfloat16): inputs and weights rounded to bf16,
// products summed and outputs kept in f32 (onednn::conv2d_forward_bf16, onednn::matmul_bf16). In
// training their backward passes run in bf16 too (the output gradient rounded, input and weight
// gradients accumulated and kept in f32), so master weights and optimiser state stay f32 as in
// PyTorch's autocast training. Other ops (batch norm, pooling, elementwise) stay f32, and so do
// the products cpudl runs on its native kernels (first layers of 1-4 channels, narrow
// classifiers, few-channel weight gradients) and the weight gradients of strided convolutions
// (oneDNN's bf16 kernel is slower there). The mode is read when an op runs forward: its backward
// follows the forward's precision. The constructor throws when the CPU has neither AVX512-BF16
// nor AMX (or CPUDL_ISA caps them).
class Bf16Autocast {
 public:
  Bf16Autocast();
  ~Bf16Autocast();
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool previous_;
};
bool bf16_autocast_enabled();

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});
// linear(relu(conv2d(x, conv_weight, conv_bias, options)).flatten(1), fc_weight, fc_bias) as one
// op: a first layer (few input channels, stride 1, images that need no gradient) feeding a
// classifier with few outputs, as the tutorial's SimpleCNN. Images are processed a few at a time
// with the convolution's output kept in cache, and the backward pass recomputes it instead of
// reading it back: SimpleCNN's 22 MB activation never goes to memory. Other shapes run the
// three ops.
Tensor conv2d_relu_linear(const Tensor& x, const Tensor& conv_weight, const Tensor& conv_bias,
                          const Conv2dOptions& options, const Tensor& fc_weight, const Tensor& fc_bias);
Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0,
                  bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, std::int64_t out_h, std::int64_t out_w);
// Training: normalises with the batch statistics and updates running_mean/running_var in place
// (unbiased variance, PyTorch's momentum convention). Inference: uses the running statistics.
// relu: relu(batch_norm2d(..)) in one pass over memory each way (ResNet's conv -> bn -> relu).
Tensor batch_norm2d(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                    const Tensor& weight, const Tensor& bias, bool training, float momentum = 0.1f,
                    float eps = 1e-5f, bool relu = false);
// Normalises over the last `normalized_dims` dimensions.
Tensor layer_norm(const Tensor& x, std::int64_t normalized_dims, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), float eps = 1e-5f);
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen = default_generator());
// Rows of weight [num, dim] picked by integer indices (any shape): result [..., dim].
Tensor embedding(const Tensor& indices, const Tensor& weight);
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim);

// ---- normalised exponentials and losses (mean reduction, as PyTorch's default)
Tensor softmax(const Tensor& x, std::int64_t dim = -1);
Tensor log_softmax(const Tensor& x, std::int64_t dim = -1);
// logits [N, C], target [N] of class indices (i32 or i64).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing = 0.0f);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target);
Tensor mse_loss(const Tensor& input, const Tensor& target);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target);

}  // namespace cpudl
