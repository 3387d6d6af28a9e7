// Batch normalisation (oneDNN) and layer normalisation (native kernels), forward and backward.
#include <cmath>
#include <cstring>

#include "dense/onednn/dense.h"
#include "ops/op_helpers.h"
#include "runtime/op_profile.h"
#include "tensor/layout.h"

namespace cpudl {
using namespace ops_detail;

Tensor batch_norm2d(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                    const Tensor& weight, const Tensor& bias, bool training, float momentum, float eps,
                    bool relu) {
  profiling::Scope profile("batch_norm2d");
  require_4d(x, "batch_norm2d");
  const std::int64_t c = x.size(1);
  auto check_channel = [&](const Tensor& t, const char* what) {
    if (t.defined() && (t.dim() != 1 || t.size(0) != c))
      throw Error(std::string("batch_norm2d: ") + what + " of shape " + shape_text(t.shape()) +
                  ", expected [" + std::to_string(c) + "] for input " + shape_text(x.shape()));
  };
  check_channel(running_mean, "running_mean");
  check_channel(running_var, "running_var");
  check_channel(weight, "weight");
  check_channel(bias, "bias");
  onednn::BatchNormShape s;
  s.batch = x.size(0), s.channels = c, s.height = x.size(2), s.width = x.size(3), s.epsilon = eps;
  // Channels-last stays channels-last (a convolution's output), as in pooling.
  const bool channels_last = is_channels_last(x) && !x.is_contiguous();
  s.layout = channels_last ? onednn::ActivationLayout::nhwc : onednn::ActivationLayout::nchw;
  const Tensor xc = channels_last ? x : contiguous_values(x);
  const Tensor scale = weight.defined() ? contiguous_values(weight) : Tensor::ones({c});
  const Tensor shift = bias.defined() ? contiguous_values(bias) : Tensor::zeros({c});
  Tensor y = empty_like(xc);
  if (!training) {
    if (!running_mean.defined() || !running_var.defined())
      throw Error("batch_norm2d: inference needs running_mean and running_var");
    const Tensor rm = contiguous_values(running_mean), rv = contiguous_values(running_var);
    onednn::batch_norm_forward_inference(s, xc.data(), scale.data(), shift.data(), rm.data(), rv.data(),
                                         y.data(),
                                         relu ? onednn::Activation::relu : onednn::Activation::none);
    // Inference is a per-channel affine map: y = x a + b with a = scale / sqrt(var + eps).
    Tensor a = Tensor::empty({c});
    for (std::int64_t i = 0; i < c; ++i) a.data()[i] = scale.data()[i] / std::sqrt(rv.data()[i] + eps);
    const Tensor saved_y = relu ? y.detach() : Tensor();
    autograd::record(y, "batch_norm2d", {x, weight, bias}, [a, xc, rm, rv, eps, saved_y](const Tensor& grad) {
      // The fused ReLU's mask: the gradient passes where y > 0.
      const Tensor g =
          saved_y.defined() ? map_pair_in_layout(native().f32_relu_backward.fn, saved_y, grad) : grad;
      const Tensor ar = a.reshape({1, -1, 1, 1});
      const Tensor xhat = div(sub(xc, rm.reshape({1, -1, 1, 1})), sqrt(add(rv, eps)).reshape({1, -1, 1, 1}));
      return std::vector<Tensor>{mul(g, ar), sum(mul(g, xhat), {0, 2, 3}), sum(g, {0, 2, 3})};
    });
    return y;
  }
  if (x.numel() / c <= 1)
    throw Error("batch_norm2d: training needs more than one value per channel, got input " +
                shape_text(x.shape()));
  Tensor mean = Tensor::empty({c}), var = Tensor::empty({c});
  // The fused ReLU's mask, oneDNN's workspace (a bit per value), kept for the backward pass.
  const std::shared_ptr<std::uint8_t[]> mask =
      relu ? std::make_shared_for_overwrite<std::uint8_t[]>(onednn::batch_norm_relu_workspace_bytes(s))
           : nullptr;
  onednn::batch_norm_forward_training(s, xc.data(), scale.data(), shift.data(), y.data(), mean.data(),
                                      var.data(), mask.get());
  if (running_mean.defined() && running_var.defined()) {
    // PyTorch updates the running variance with the unbiased batch variance.
    const double count = static_cast<double>(x.numel() / c);
    float* rm = running_mean.data();
    float* rv = running_var.data();
    for (std::int64_t i = 0; i < c; ++i) {
      rm[i] = (1.0f - momentum) * rm[i] + momentum * mean.data()[i];
      rv[i] =
          (1.0f - momentum) * rv[i] + momentum * static_cast<float>(var.data()[i] * count / (count - 1.0));
    }
    running_mean.bump_version();
    running_var.bump_version();
  }
  autograd::record(
      y, "batch_norm2d", {x, weight, bias}, [s, xc, scale, shift, mean, var, mask](const Tensor& g) {
        // The input gradient goes into the output gradient's buffer when nothing else holds it
        // (oneDNN's batch norm backward runs in place): one activation-sized buffer fewer.
        const bool disposable = autograd::gradient_is_disposable(g);
        const Tensor gc = values_in_layout_of(g, xc);
        const bool own = disposable || gc.impl() != g.impl();  // or a copy made just now
        Tensor dx = own && gc.dtype() == DType::f32 ? gc : empty_like(xc),
               dscale = Tensor::empty({s.channels}), dshift = Tensor::empty({s.channels});
        onednn::batch_norm_backward(s, xc.data(), gc.data(), scale.data(), shift.data(), mean.data(),
                                    var.data(), dx.data(), dscale.data(), dshift.data(), mask.get());
        return std::vector<Tensor>{dx, dscale, dshift};
      });
  return y;
}

Tensor layer_norm(const Tensor& x, std::int64_t normalized_dims, const Tensor& weight, const Tensor& bias,
                  float eps) {
  profiling::Scope profile("layer_norm");
  require_f32(x, "layer_norm", "input");
  if (normalized_dims < 1 || normalized_dims > x.dim())
    throw Error("layer_norm: cannot normalise the last " + std::to_string(normalized_dims) + " dims of " +
                shape_text(x.shape()));
  const Shape norm_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const Tensor* t : {&weight, &bias})
    if (t->defined() && t->shape() != norm_shape)
      throw Error("layer_norm: weight/bias of shape " + shape_text(t->shape()) + ", expected " +
                  shape_text(norm_shape));
  const std::int64_t cols = shape_numel(norm_shape), rows = cols ? x.numel() / cols : 0;
  const Tensor xc = contiguous_values(x);
  const Tensor wc = weight.defined() ? contiguous_values(weight) : Tensor();
  const Tensor bc = bias.defined() ? contiguous_values(bias) : Tensor();
  Tensor y = Tensor::empty(x.shape()), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  native().f32_layer_norm_forward.fn(xc.data(), wc.defined() ? wc.data() : nullptr,
                                     bc.defined() ? bc.data() : nullptr, y.data(), mean.data(), rstd.data(),
                                     static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), eps);
  const bool has_w = weight.defined(), has_b = bias.defined();
  autograd::record(y, "layer_norm", {x, weight, bias},
                   [xc, wc, mean, rstd, rows, cols, has_w, has_b, norm_shape](const Tensor& g) {
                     const Tensor gc = contiguous_values(g);
                     Tensor dx = Tensor::empty(xc.shape());
                     Tensor dw = has_w ? Tensor::zeros(norm_shape) : Tensor(),
                            db = has_b ? Tensor::zeros(norm_shape) : Tensor();
                     native().f32_layer_norm_backward.fn(
                         xc.data(), gc.data(), has_w ? wc.data() : nullptr, mean.data(), rstd.data(),
                         dx.data(), has_w ? dw.data() : nullptr, has_b ? db.data() : nullptr,
                         static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
                     return std::vector<Tensor>{dx, dw, db};
                   });
  return y;
}

}  // namespace cpudl
