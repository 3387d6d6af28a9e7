// conv2d: its shape rule, the forward pass on the path the layer's shape picks (planar first
// layers, Winograd, a whole-map product, the pointwise GEMM, oneDNN in f32 or bf16 autocast), and
// its backward on the path the forward took (cropped dead taps, native weight gradients).
#include <cmath>
#include <cstring>

#include "dense/conv/implicit_gemm_weight_grad.h"
#include "dense/conv/pointwise_conv.h"
#include "dense/conv/tap_gemm_weight_grad.h"
#include "dense/conv/winograd_conv.h"
#include "dense/onednn/dense.h"
#include "kernels/conv/conv.h"
#include "ops/conv_as_linear.h"
#include "ops/op_helpers.h"
#include "ops/planar_conv.h"
#include "runtime/op_profile.h"
#include "tensor/layout.h"

namespace cpudl {
using namespace ops_detail;

namespace {

// A first layer's weight gradient (1-4 input channels) on the native kernel (kernels/conv/):
// oneDNN's NHWC backward-weights pass runs it at 7-8% of peak. Images are split over the threads,
// each summing into its own [KH][KW][IC][OC] buffer; the sums are then added and transposed to
// PyTorch's OIHW.
// Below kFewInputChannelsMinOutputs (planar_conv.h) oneDNN stays.
void few_channel_backward_weights(const onednn::ConvShape& s, const float* x, const float* dy, float* dw,
                                  float* db) {
  const kernels::ConvWindow w{
      static_cast<std::size_t>(s.in_channels),  static_cast<std::size_t>(s.height),
      static_cast<std::size_t>(s.width),        static_cast<std::size_t>(s.out_channels),
      static_cast<std::size_t>(s.out_height()), static_cast<std::size_t>(s.out_width()),
      static_cast<std::size_t>(s.kernel_h),     static_cast<std::size_t>(s.kernel_w),
      static_cast<std::size_t>(s.stride_h),     static_cast<std::size_t>(s.stride_w),
      static_cast<std::size_t>(s.pad_h),        static_cast<std::size_t>(s.pad_w),
      static_cast<std::size_t>(s.dilation_h),   static_cast<std::size_t>(s.dilation_w)};
  const std::size_t oc_pad = kernels::conv_padded_channels(w.out_channels);
  const std::size_t taps = w.kernel_h * w.kernel_w * w.in_channels, per_thread = (taps + 1) * oc_pad;
  const std::size_t in_image = w.height * w.width * w.in_channels,
                    out_image = w.out_h * w.out_w * w.out_channels;
  const auto kernel = native().f32_conv_backward_weights_nhwc.fn;
  const std::vector<float> sums =
      sum_over_images(static_cast<std::size_t>(s.batch), per_thread, [&](std::size_t n, float* mine) {
        kernel(w, x + n * in_image, dy + n * out_image, mine, db ? mine + taps * oc_pad : nullptr);
      });
  for (std::size_t oc = 0; oc < w.out_channels; ++oc) {
    for (std::size_t ic = 0; ic < w.in_channels; ++ic)
      for (std::size_t kh = 0; kh < w.kernel_h; ++kh)
        for (std::size_t kw = 0; kw < w.kernel_w; ++kw)
          dw[((oc * w.in_channels + ic) * w.kernel_h + kh) * w.kernel_w + kw] =
              sums[((kh * w.kernel_w + kw) * w.in_channels + ic) * oc_pad + oc];
    if (db) db[oc] = sums[taps * oc_pad + oc];
  }
}

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

KernelWindow window_of(const CroppedKernel& c, const Shape& weight_shape) {
  return {weight_shape[2], weight_shape[3], c.kh_begin, c.kw_begin};
}

// The live window [kh_begin, +kernel_h) x [kw_begin, +kernel_w) of weights [OC][IC][KH][KW], and
// a window's gradient placed in a zero kernel of `full` shape: strided views copied by
// copy_strided, which splits the rows over the threads.
Tensor weights_of_window(const Tensor& weight, const CroppedKernel& c) {
  NoGradGuard no_grad;  // oneDNN's copy of the weights, not a node of the graph
  return contiguous_values(weight.slice(2, c.kh_begin, c.kh_begin + c.shape.kernel_h)
                               .slice(3, c.kw_begin, c.kw_begin + c.shape.kernel_w));
}

Tensor gradient_of_kernel(const Tensor& window_grad, const CroppedKernel& c, const Shape& full) {
  Tensor out = Tensor::zeros(full);
  copy_strided(window_grad, out.slice(2, c.kh_begin, c.kh_begin + c.shape.kernel_h)
                                .slice(3, c.kw_begin, c.kw_begin + c.shape.kernel_w));
  return out;
}

}  // namespace

namespace {
thread_local bool g_bf16_autocast = false;

// conv2d's backward pass, in the precision and on the path its forward took.
struct ConvBackward {
  CroppedKernel crop;
  // Channels-last input; the (cropped) weights oneDNN runs, or a whole-map product's E.
  Tensor xc, wc, expanded;
  std::uint64_t version;
  bool bf16;
  // The backward-data pass as a Winograd convolution, and the weight gradient by Winograd
  // (stride-1 3x3 layers; see conv2d below).
  std::optional<conv::WinogradConvShape> winograd_backward, winograd_weights;
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
      if (expanded.defined())
        conv_as_linear_backward_data(run, gc.data(), expanded, dx.data(), bf16);
      else if (winograd_backward)
        conv::winograd_convolve(*winograd_backward, wc.data(), conv::WinogradPass::backward_data, gc.data(),
                                nullptr, -INFINITY, INFINITY, dx.data());
      else if (!bf16 && conv::pointwise_conv_backward_data_preferred(run))  // 1x1/2 shortcuts
        conv::pointwise_conv_backward_data(run, gc.data(), wc.data(), dx.data());
      else if (bf16)
        onednn::conv2d_backward_data_bf16(run, gc.data(), wc.data(), version, dx.data());
      else
        onednn::conv2d_backward_data(run, gc.data(), wc.data(), version, dx.data());
    }
    if (need_dw || need_db) {
      // oneDNN computes both in one pass; a frozen weight's gradient is computed and dropped.
      if (need_db) db = Tensor::empty({run.out_channels});
      float* db_out = need_db ? db.data() : nullptr;
      if (expanded.defined()) {  // folded straight into the whole kernel, dead taps included
        dw = Tensor::empty(weight_shape);
        conv_as_linear_backward_weights(run, window_of(crop, weight_shape), xc.data(), gc.data(), dw.data(),
                                        db_out, bf16);
        return {dx, need_dw ? dw : Tensor(), db};
      }
      dw = Tensor::empty(wc.shape());
      if (winograd_weights)
        conv::winograd_backward_weights(*winograd_weights, xc.data(), gc.data(), dw.data(), db_out);
      // Few-channel stride-1 first layers; strided ones (ResNet's 7x7/2 stem) took 66-70 ms on this
      // kernel against oneDNN's 31-33 (batch 16 at 224x224, 1 thread) and go to the tap-major GEMM.
      else if (run.groups == 1 && run.in_channels <= kFewInputChannels &&
               run.out_channels >= kFewInputChannelsMinOutputs && run.stride_h == 1 && run.stride_w == 1)
        few_channel_backward_weights(run, xc.data(), gc.data(), dw.data(), db_out);
      // Strided layers with up to 128 input channels: a GEMM per kernel row with x read in place
      // (dense/conv/tap_gemm_weight_grad.h); with more, and 256+ output channels, one implicit GEMM
      // (dense/conv/implicit_gemm_weight_grad.h).
      else if (conv::tap_gemm_weight_grad_preferred(run))
        conv::tap_gemm_weight_grad(run, xc.data(), gc.data(), dw.data(), db_out);
      else if (conv::implicit_gemm_weight_grad_preferred(run))
        conv::implicit_gemm_weight_grad(run, xc.data(), gc.data(), dw.data(), db_out);
      // oneDNN's AMX weight gradient is slower than its f32 one for strided convolutions
      // (ResNet-18 at 32x32, batch 64, 1 thread: 1x1/2 0.44-1.22 ms against 0.18-0.67, 3x3/2
      // 1.5-2.8 ms against 1.2-1.9; but 3x3/1 2.7 ms against 6.3): those stay f32, only more exact.
      else if (bf16 && run.stride_h == 1 && run.stride_w == 1)
        onednn::conv2d_backward_weights_bf16(run, xc.data(), gc.data(), dw.data(), db_out);
      else
        onednn::conv2d_backward_weights(run, xc.data(), gc.data(), dw.data(), db_out);
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
  if (!onednn::bf16_compute_available())
    throw Error("bf16: this CPU has neither AVX512-BF16 nor AMX (or CPUDL_ISA caps them); use fp32");
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
  if (planar_first_layer(s, x)) {
    s.validate();
    return planar_conv2d(s, x, weight, bias, o.relu);
  }
  // Activations in and out channels-last (tensor/layout.h): oneDNN's direct convolutions read
  // and write NHWC, and run 4-6x faster on it than on NCHW (im2col + GEMM) here.
  // (Measured with `cpudl bench model --train`, 1 thread: LeNet-5 1.2-1.4x and ResNet-18 at
  // 32x32 1.4-1.6x faster than NCHW; SimpleCNN ~8% slower, as its flatten into the classifier
  // transposes a 22 MB activation back to NCHW order in each direction.)
  s.layout = onednn::ActivationLayout::nhwc;
  s.validate();
  const Tensor xc = channels_last_values(x);
  const Tensor bc = bias.defined() ? contiguous_values(bias) : Tensor();
  const Shape out_shape = {s.batch, s.out_channels, s.out_height(), s.out_width()};
  Tensor y = empty_channels_last(out_shape);
  // Kernel taps that only ever read padding are cropped away: ResNet-18's last stage at 32x32
  // input runs 3x3 kernels on 1x1 maps, where oneDNN's backward-weights pass took 150 ms per call
  // for the 1/9 of the work that matters.
  const CroppedKernel crop = crop_dead_taps(s);
  const onednn::ConvShape& run = crop.shape;
  // Maps no larger than the kernel's reach (the deep end of a network on small images) run as
  // one matrix product (conv_as_linear.h), E gathered from the stored kernel's live window.
  const Tensor expanded =
      conv_covers_whole_map(run)
          ? conv_expanded_weights(run, contiguous_values(weight).data(), window_of(crop, weight.shape()))
          : Tensor();
  const Tensor wc = expanded.defined() ? Tensor()
                    : crop.cropped     ? weights_of_window(weight, crop)
                                       : contiguous_values(weight);
  // A cropped copy is new on every call: version 0 has oneDNN reorder it each time.
  const std::uint64_t version = !crop.cropped && weight.is_contiguous() ? weights_version(weight) : 0;
  const bool bf16 = g_bf16_autocast;
  // Stride-1 3x3 layers (fp32) run forward and backward-data as Winograd convolutions (conv/
  // winograd_conv.h), the weights transformed on each call, and their weight and bias gradients
  // by Winograd too: 4x fewer multiplies per output tile than oneDNN's direct convolution (batch
  // 16 at 224x224, one thread: forward 18-20 -> 8-12 ms, backward data 19-24 -> 8-13 ms, weight
  // gradient 20-26 -> 9-13 ms, docs/BENCHMARKS.md). The rounding error grows to ~1e-5 of a
  // layer's output scale; CPUDL_WINOGRAD=0 runs the direct convolutions.
  const bool winograd_candidate = !bf16 && !expanded.defined() && !crop.cropped;
  const auto winograd_forward =
      winograd_candidate ? conv::winograd_training_shape(run, conv::WinogradPass::forward) : std::nullopt;
  const auto winograd_backward = winograd_candidate && x.requires_grad()
                                     ? conv::winograd_training_shape(run, conv::WinogradPass::backward_data)
                                     : std::nullopt;
  if (winograd_forward) {
    conv::winograd_convolve(*winograd_forward, wc.data(), conv::WinogradPass::forward, xc.data(),
                            bc.defined() ? bc.data() : nullptr, o.relu ? 0.0f : -INFINITY, INFINITY,
                            y.data());
  } else if (expanded.defined()) {
    conv_as_linear_forward(run, xc.data(), expanded, bc.defined() ? bc.data() : nullptr, o.relu, y.data(),
                           bf16);
  } else if (!bf16 && !o.relu && conv::pointwise_conv_forward_preferred(run)) {
    conv::pointwise_conv_forward(run, xc.data(), wc.data(), bc.defined() ? bc.data() : nullptr, y.data());
  } else if (bf16) {
    onednn::conv2d_forward_bf16(run, xc.data(), wc.data(), version, bc.defined() ? bc.data() : nullptr,
                                y.data(), o.relu ? onednn::Activation::relu : onednn::Activation::none);
  } else {
    onednn::ConvEpilogue epilogue;
    if (o.relu) epilogue.activation = onednn::Activation::relu;
    onednn::conv2d_forward(run, xc.data(), wc.data(), version, bc.defined() ? bc.data() : nullptr, y.data(),
                           epilogue);
  }
  count_forward_flops(s.flops());
  autograd::record(
      y, "conv2d", {x, weight, bias},
      ConvBackward{crop, xc, wc, expanded, version, bf16, winograd_backward, winograd_forward,
                   x.requires_grad(), weight.requires_grad(), bias.defined() && bias.requires_grad(),
                   weight.shape(), o.relu ? y.detach() : Tensor()});
  return y;
}

}  // namespace cpudl
