// Max, average and adaptive average pooling, forward and backward: max and average pooling on
// the implementation the pooling list picks (dense/pool/pool_list.h).
#include <cmath>
#include <cstring>

#include "dense/onednn/dense.h"
#include "dense/pool/pool_list.h"
#include "ops/op_helpers.h"
#include "runtime/op_profile.h"
#include "tensor/layout.h"

namespace cpudl {
using namespace ops_detail;

namespace {
Tensor pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
              onednn::PoolKind kind, const char* name) {
  profiling::Scope profile(name);
  require_4d(x, name);
  onednn::PoolShape s;
  s.batch = x.size(0), s.channels = x.size(1), s.height = x.size(2), s.width = x.size(3);
  s.kernel_h = s.kernel_w = kernel;
  s.stride_h = s.stride_w = stride > 0 ? stride : kernel;  // PyTorch: stride defaults to kernel
  s.pad_h = s.pad_w = padding;
  s.kind = kind;
  // Channels-last input (a convolution's output) is pooled in its layout: oneDNN's NHWC pooling
  // is vectorised over channels, its NCHW pooling is a scalar loop.
  const bool channels_last = is_channels_last(x) && !x.is_contiguous();
  s.layout = channels_last ? onednn::ActivationLayout::nhwc : onednn::ActivationLayout::nchw;
  s.validate();
  const Tensor xc = channels_last ? x : contiguous_values(x);
  const Shape out_shape = {s.batch, s.channels, s.out_height(), s.out_width()};
  Tensor y = channels_last ? empty_channels_last(out_shape) : Tensor::empty(out_shape);
  const bool training = grad_mode_enabled() && x.requires_grad();
  const pool::PoolImpl& impl = pool::choose_pool_impl(s);
  // Every byte of the workspace is written by the forward pass: no zero-fill.
  const std::size_t bytes = training ? impl.workspace_bytes(s) : 0;
  const std::shared_ptr<std::uint8_t[]> workspace =
      bytes ? std::make_shared_for_overwrite<std::uint8_t[]>(bytes) : nullptr;
  impl.forward(s, xc.data(), y.data(), workspace.get());
  autograd::record(y, name, {x}, [s, &impl, workspace, channels_last](const Tensor& g) {
    const Tensor gc = channels_last ? channels_last_values(g) : contiguous_values(g);
    const Shape in_shape = {s.batch, s.channels, s.height, s.width};
    Tensor dx = channels_last ? empty_channels_last(in_shape) : Tensor::empty(in_shape);
    impl.backward(s, gc.data(), workspace.get(), dx.data());
    return std::vector<Tensor>{dx};
  });
  return y;
}
}  // namespace

Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  return pool2d(x, kernel, stride, padding, onednn::PoolKind::max, "max_pool2d");
}

Tensor avg_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                  bool count_include_pad) {
  return pool2d(
      x, kernel, stride, padding,
      count_include_pad ? onednn::PoolKind::avg_include_padding : onednn::PoolKind::avg_exclude_padding,
      "avg_pool2d");
}

// PyTorch's bins: output i averages input [floor(i*in/out), ceil((i+1)*in/out)).
Tensor adaptive_avg_pool2d(const Tensor& x, std::int64_t out_h, std::int64_t out_w) {
  profiling::Scope profile("adaptive_avg_pool2d");
  require_4d(x, "adaptive_avg_pool2d");
  if (out_h < 1 || out_w < 1) throw Error("adaptive_avg_pool2d: output size must be positive");
  const std::int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const Tensor xc = contiguous_values(x);
  Tensor y = Tensor::empty({n, c, out_h, out_w});
  auto bin = [](std::int64_t i, std::int64_t in, std::int64_t out) {
    return std::make_pair(i * in / out, ((i + 1) * in + out - 1) / out);
  };
  for (std::int64_t p = 0; p < n * c; ++p)
    for (std::int64_t i = 0; i < out_h; ++i)
      for (std::int64_t j = 0; j < out_w; ++j) {
        const auto [h0, h1] = bin(i, h, out_h);
        const auto [w0, w1] = bin(j, w, out_w);
        double acc = 0;
        for (std::int64_t a = h0; a < h1; ++a)
          for (std::int64_t b = w0; b < w1; ++b) acc += xc.data()[(p * h + a) * w + b];
        y.data()[(p * out_h + i) * out_w + j] =
            static_cast<float>(acc / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  autograd::record(y, "adaptive_avg_pool2d", {x}, [n, c, h, w, out_h, out_w, bin](const Tensor& g) {
    const Tensor gc = contiguous_values(g);
    Tensor dx = Tensor::zeros({n, c, h, w});
    for (std::int64_t p = 0; p < n * c; ++p)
      for (std::int64_t i = 0; i < out_h; ++i)
        for (std::int64_t j = 0; j < out_w; ++j) {
          const auto [h0, h1] = bin(i, h, out_h);
          const auto [w0, w1] = bin(j, w, out_w);
          const float share =
              gc.data()[(p * out_h + i) * out_w + j] / static_cast<float>((h1 - h0) * (w1 - w0));
          for (std::int64_t a = h0; a < h1; ++a)
            for (std::int64_t b = w0; b < w1; ++b) dx.data()[(p * h + a) * w + b] += share;
        }
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace cpudl
