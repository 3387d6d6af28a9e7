// conv2d: its shape rule, and its passes on the implementations the dense layer's list picks
// (dense/conv/conv_list.h): the forward pass, and a backward pass that walks the same list for
// backward-data and backward-weights, with the precision and the cropped kernel the forward took.
#include <cmath>
#include <cstring>

#include "dense/conv/conv_list.h"
#include "dense/onednn/dense.h"
#include "ops/op_helpers.h"
#include "ops/planar_conv.h"
#include "runtime/op_profile.h"
#include "tensor/layout.h"

namespace cpudl {
using namespace ops_detail;

namespace {

// The taps [begin, end) of one kernel dimension that read at least one input element (the
// others only ever see padding), by walking the output positions.
std::pair<std::int64_t, std::int64_t> live_taps(std::int64_t in, std::int64_t out, std::int64_t kernel,
                                                std::int64_t stride, std::int64_t pad,
                                                std::int64_t dilation) {
  std::int64_t begin = kernel, end = 0;
  for (std::int64_t k = 0; k < kernel; ++k)
    for (std::int64_t o = 0; o < out; ++o) {
      const std::int64_t at = o * stride - pad + k * dilation;
      if (at >= 0 && at < in) {
        begin = std::min(begin, k);
        end = std::max(end, k + 1);
        break;
      }
    }
  if (begin >= end) return {0, kernel};  // cannot happen for a valid shape; keep the kernel
  return {begin, end};
}

// The convolution to run: `s` itself, or `s` on the live window of its kernel, with the padding
// moved so that every output position reads the same inputs.
struct CroppedKernel {
  onednn::ConvShape shape;
  bool cropped = false;
  std::int64_t kh_begin = 0, kw_begin = 0;
};

CroppedKernel crop_dead_taps(const onednn::ConvShape& s) {
  CroppedKernel c;
  c.shape = s;
  const auto [h0, h1] = live_taps(s.height, s.out_height(), s.kernel_h, s.stride_h, s.pad_h, s.dilation_h);
  const auto [w0, w1] = live_taps(s.width, s.out_width(), s.kernel_w, s.stride_w, s.pad_w, s.dilation_w);
  if (h1 - h0 == s.kernel_h && w1 - w0 == s.kernel_w) return c;
  onednn::ConvShape t = s;
  t.kernel_h = h1 - h0, t.kernel_w = w1 - w0;
  t.pad_h = s.pad_h - h0 * s.dilation_h, t.pad_w = s.pad_w - w0 * s.dilation_w;
  // ConvShape pads symmetrically: crop only when that keeps the output size (and so every
  // output's input window) unchanged, as on the square maps of real networks.
  if (t.pad_h < 0 || t.pad_w < 0 || t.out_height() != s.out_height() || t.out_width() != s.out_width())
    return c;
  c.shape = t;
  c.cropped = true;
  c.kh_begin = h0, c.kw_begin = w0;
  return c;
}

// The live window [kh_begin, +kernel_h) x [kw_begin, +kernel_w) of weights [OC][IC][KH][KW] as
// a contiguous [OC][IC][kernel_h][kernel_w], and a window's gradient placed in a zero kernel of
// the full shape: one pass per filter, split over the threads. (copy_strided of the sliced view
// walked 1-float rows when a 3x3 kernel crops to 1x1, ResNet-18's last stage at 32x32: a tenth
// of a training step.)
Tensor weights_of_window(const Tensor& weight, const CroppedKernel& c) {
  NoGradGuard no_grad;  // the algorithms' copy of the weights, not a node of the graph
  const Tensor full = contiguous_values(weight);
  const std::int64_t fh = weight.size(2), fw = weight.size(3), kh = c.shape.kernel_h, kw = c.shape.kernel_w;
  Tensor out = Tensor::empty({weight.size(0), weight.size(1), kh, kw});
  const float* src = full.data();
  float* dst = out.data();
  parallel_for(static_cast<std::size_t>(weight.size(0) * weight.size(1)), 256,
               [&](std::size_t b, std::size_t e) {
                 for (auto f = static_cast<std::int64_t>(b); f < static_cast<std::int64_t>(e); ++f)
                   for (std::int64_t h = 0; h < kh; ++h)
                     for (std::int64_t w = 0; w < kw; ++w)
                       dst[(f * kh + h) * kw + w] = src[(f * fh + c.kh_begin + h) * fw + c.kw_begin + w];
               });
  return out;
}

Tensor gradient_of_kernel(const Tensor& window_grad, const CroppedKernel& c, const Shape& full) {
  Tensor out = Tensor::empty(full);
  const std::int64_t fh = full[2], fw = full[3], kh = c.shape.kernel_h, kw = c.shape.kernel_w;
  const float* src = window_grad.data();
  float* dst = out.data();
  parallel_for(static_cast<std::size_t>(full[0] * full[1]), 256, [&](std::size_t b, std::size_t e) {
    for (auto f = static_cast<std::int64_t>(b); f < static_cast<std::int64_t>(e); ++f) {
      float* filter = dst + f * fh * fw;
      std::fill(filter, filter + fh * fw, 0.0f);
      for (std::int64_t h = 0; h < kh; ++h)
        for (std::int64_t w = 0; w < kw; ++w)
          filter[(c.kh_begin + h) * fw + c.kw_begin + w] = src[(f * kh + h) * kw + w];
    }
  });
  return out;
}

}  // namespace

namespace {
thread_local bool g_bf16_autocast = false;

// conv2d's backward pass: each pass on the implementation the list picks for it, in the
// precision the forward took.
struct ConvBackward {
  CroppedKernel crop;
  Tensor xc, wc;  // channels-last input; the (cropped) weights
  std::uint64_t version;
  conv::ConvContext context;
  // The forward's implementation and what it prepared from the weights, when that serves the
  // other passes (the whole-map product's E).
  const conv::ConvImpl* forward_impl;
  std::shared_ptr<const conv::ConvPrepared> prepared;
  // Gradients only for inputs that need them: a first layer's input (the images) needs none, and
  // its backward-data pass would be the most expensive part of that layer's backward.
  bool need_dx, need_dw, need_db;
  Shape weight_shape;
  Tensor saved_y;  // the output, when a ReLU was fused

  std::vector<Tensor> operator()(const Tensor& g) const {
    const onednn::ConvShape& run = crop.shape;
    Tensor gc = channels_last_values(g);
    // The fused ReLU's mask: the gradient passes where y > 0.
    if (saved_y.defined()) gc = map_pair_in_layout(native().f32_relu_backward.fn, saved_y, gc);
    Tensor dx, dw, db;
    if (need_dx) {
      dx = empty_channels_last(xc.shape());
      const conv::ConvImpl& impl = conv::choose_conv_impl(run, conv::ConvPass::backward_data, context);
      conv::ConvArgs a;
      a.src = gc.data(), a.weights = wc.data(), a.weights_version = version, a.dst = dx.data();
      if (&impl == forward_impl) a.prepared = prepared.get();
      impl.run(run, conv::ConvPass::backward_data, a);
    }
    if (need_dw || need_db) {
      // Every implementation computes both in one pass; a frozen weight's gradient is computed and dropped.
      if (need_db) db = Tensor::empty({run.out_channels});
      dw = Tensor::empty(wc.shape());
      const conv::ConvImpl& impl = conv::choose_conv_impl(run, conv::ConvPass::backward_weights, context);
      conv::ConvArgs a;
      a.src = xc.data(), a.diff_dst = gc.data(), a.dst = dw.data(),
      a.diff_bias = need_db ? db.data() : nullptr;
      impl.run(run, conv::ConvPass::backward_weights, a);
      if (!need_dw)
        dw = Tensor();
      else if (crop.cropped)
        dw = gradient_of_kernel(dw, crop, weight_shape);
    }
    return {dx, dw, db};
  }
};
}  // namespace

Bf16Autocast::Bf16Autocast() : previous_(g_bf16_autocast) {
  onednn::require_bf16_compute();
  g_bf16_autocast = true;
}
Bf16Autocast::~Bf16Autocast() { g_bf16_autocast = previous_; }
bool bf16_autocast_enabled() { return g_bf16_autocast; }

onednn::ConvShape ops_detail::conv2d_shape(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                           const Conv2dOptions& o) {
  require_4d(x, "conv2d");
  require_f32(weight, "conv2d", "weight");
  if (weight.dim() != 4)
    throw Error("conv2d: weight of shape " + shape_text(weight.shape()) + ", expected [O, I/groups, KH, KW]");
  onednn::ConvShape s;
  s.batch = x.size(0), s.in_channels = x.size(1), s.height = x.size(2), s.width = x.size(3);
  s.out_channels = weight.size(0), s.kernel_h = weight.size(2), s.kernel_w = weight.size(3);
  s.stride_h = o.stride_h, s.stride_w = o.stride_w, s.pad_h = o.pad_h, s.pad_w = o.pad_w;
  s.dilation_h = o.dilation_h, s.dilation_w = o.dilation_w, s.groups = o.groups;
  if (o.groups < 1 || weight.size(1) * o.groups != s.in_channels)
    throw Error("conv2d: input of shape " + shape_text(x.shape()) + " has " + std::to_string(s.in_channels) +
                " channels, but weight " + shape_text(weight.shape()) + " with groups=" +
                std::to_string(o.groups) + " expects " + std::to_string(weight.size(1) * o.groups));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != s.out_channels))
    throw Error("conv2d: bias of shape " + shape_text(bias.shape()) + ", expected [" +
                std::to_string(s.out_channels) + "]");
  return s;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  profiling::Scope profile("conv2d");
  onednn::ConvShape s = conv2d_shape(x, weight, bias, o);
  // Activations in and out channels-last (tensor/layout.h): oneDNN's direct convolutions read
  // and write NHWC, and run 4-6x faster on it than on NCHW (im2col + GEMM) here; so do cpudl's
  // own algorithms (docs/ARCHITECTURE.md).
  s.layout = onednn::ActivationLayout::nhwc;
  s.validate();
  // Kernel taps that only ever read padding are cropped away: ResNet-18's last stage at 32x32
  // input runs 3x3 kernels on 1x1 maps, where oneDNN's backward-weights pass took 150 ms per call
  // for the 1/9 of the work that matters.
  const CroppedKernel crop = crop_dead_taps(s);
  const onednn::ConvShape& run = crop.shape;
  conv::ConvContext context;
  context.bf16 = g_bf16_autocast;
  context.activation = o.relu ? onednn::Activation::relu : onednn::Activation::none;
  // The planar layer (first layers whose images need no gradient) runs the stored kernel whole.
  context.input_needs_grad = x.requires_grad() || crop.cropped;
  const conv::ConvImpl& impl = conv::choose_conv_impl(run, conv::ConvPass::forward, context);
  if (impl.name == "planar") return planar_conv2d(s, x, weight, bias, o.relu);
  const Tensor xc = channels_last_values(x);
  const Tensor bc = bias.defined() ? contiguous_values(bias) : Tensor();
  const Shape out_shape = {s.batch, s.out_channels, s.out_height(), s.out_width()};
  Tensor y = empty_channels_last(out_shape);
  const Tensor wc = crop.cropped ? weights_of_window(weight, crop) : contiguous_values(weight);
  // A cropped copy is new on every call: version 0 has oneDNN reorder it each time.
  const std::uint64_t version = !crop.cropped && weight.is_contiguous() ? weights_version(weight) : 0;
  conv::ConvArgs a;
  a.src = xc.data(), a.weights = wc.data(), a.weights_version = version;
  a.bias = bc.defined() ? bc.data() : nullptr, a.dst = y.data();
  a.epilogue.activation = context.activation;
  // What the forward prepares from the weights is kept for the backward pass when it serves it
  // (the whole-map product's E, built once per step).
  std::shared_ptr<const conv::ConvPrepared> prepared;
  if (impl.prepare && impl.serves_passes) prepared = impl.prepare(run, conv::ConvPass::forward, wc.data());
  a.prepared = prepared.get();
  impl.run(run, conv::ConvPass::forward, a);
  count_forward_flops(s.flops());
  autograd::record(
      y, "conv2d", {x, weight, bias},
      ConvBackward{crop, xc, wc, version, context, &impl, prepared, x.requires_grad(), weight.requires_grad(),
                   bias.defined() && bias.requires_grad(), weight.shape(), o.relu ? y.detach() : Tensor()});
  return y;
}

}  // namespace cpudl
