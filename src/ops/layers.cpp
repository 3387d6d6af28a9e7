// Convolution, pooling and batch normalisation (through oneDNN), layer norm (native kernels),
// dropout, embedding and concatenation.
#include <cmath>
#include <cstring>

#include "conv/implicit_gemm_weight_grad.h"
#include "conv/pointwise_conv.h"
#include "conv/tap_gemm_weight_grad.h"
#include "conv/winograd_conv.h"
#include "kernels/conv/conv.h"
#include "onednn/dense.h"
#include "ops/conv_as_linear.h"
#include "ops/op_helpers.h"
#include "ops/planar_conv.h"
#include "runtime/op_profile.h"
#include "tensor/layout.h"

namespace cpudl {
using namespace ops_detail;

namespace {

void require_4d(const Tensor& x, const char* op) {
  require_f32(x, op, "input");
  if (x.dim() != 4)
    throw Error(std::string(op) + ": input of shape " + shape_text(x.shape()) + ", expected [N, C, H, W]");
}

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
      // (conv/tap_gemm_weight_grad.h); with more, and 256+ output channels, one implicit GEMM
      // (conv/implicit_gemm_weight_grad.h).
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
  // Channels-last max pooling runs on the native kernel (kernels/pool/), which keeps its own
  // per-output argmax taps. First for channel counts that do not fill oneDNN's vector (LeNet-5's
  // 6); then measured faster for full vectors too (1 thread: LeNet-5's 16-channel 2x2 pool 2.2 ->
  // ~0.9 ms forward, 1.4 -> ~1.0 ms backward; ResNet-18's 64-channel 3x3/2 pool at 224x224,
  // batch 16, 35.3 -> 18.8 ms).
  const bool native_max = channels_last && kind == onednn::PoolKind::max && s.kernel_h * s.kernel_w <= 255;
  if (native_max) {
    const kernels::PoolWindow w{
        static_cast<std::size_t>(s.channels),    static_cast<std::size_t>(s.height),
        static_cast<std::size_t>(s.width),       static_cast<std::size_t>(s.out_height()),
        static_cast<std::size_t>(s.out_width()), static_cast<std::size_t>(s.kernel_h),
        static_cast<std::size_t>(s.kernel_w),    static_cast<std::size_t>(s.stride_h),
        static_cast<std::size_t>(s.stride_w),    static_cast<std::size_t>(s.pad_h),
        static_cast<std::size_t>(s.pad_w)};
    const std::size_t in_image = w.height * w.width * w.channels, out_image = w.out_h * w.out_w * w.channels;
    // Every entry is written by the forward kernel: no zero-fill.
    const std::shared_ptr<std::uint8_t[]> argmax =
        training
            ? std::make_shared_for_overwrite<std::uint8_t[]>(out_image * static_cast<std::size_t>(s.batch))
            : nullptr;
    const float* src = xc.data();
    float* dst = y.data();
    std::uint8_t* arg = argmax.get();
    const auto forward = native().f32_max_pool_nhwc.fn;
    parallel_for(static_cast<std::size_t>(s.batch), 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t n = b; n < e; ++n)
        forward(w, src + n * in_image, dst + n * out_image, arg ? arg + n * out_image : nullptr);
    });
    autograd::record(y, name, {x}, [s, w, argmax, in_image, out_image](const Tensor& g) {
      const Tensor gc = channels_last_values(g);
      Tensor dx = empty_channels_last({s.batch, s.channels, s.height, s.width});
      const float* pg = gc.data();
      float* pd = dx.data();
      const std::uint8_t* pa = argmax.get();
      const auto backward = native().f32_max_pool_nhwc_backward.fn;
      parallel_for(static_cast<std::size_t>(s.batch), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t n = b; n < e; ++n)
          backward(w, pg + n * out_image, pa + n * out_image, pd + n * in_image);
      });
      return std::vector<Tensor>{dx};
    });
    return y;
  }
  auto workspace =
      std::make_shared<std::vector<unsigned char>>(training ? onednn::pool2d_workspace_bytes(s) : 0);
  onednn::pool2d_forward(s, xc.data(), y.data(), workspace->empty() ? nullptr : workspace->data());
  autograd::record(y, name, {x}, [s, workspace, channels_last](const Tensor& g) {
    const Tensor gc = channels_last ? channels_last_values(g) : contiguous_values(g);
    const Shape in_shape = {s.batch, s.channels, s.height, s.width};
    Tensor dx = channels_last ? empty_channels_last(in_shape) : Tensor::empty(in_shape);
    onednn::pool2d_backward(s, gc.data(), workspace->empty() ? nullptr : workspace->data(), dx.data());
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
        const Tensor gc = values_in_layout_of(g, xc);
        Tensor dx = empty_like(xc), dscale = Tensor::empty({s.channels}),
               dshift = Tensor::empty({s.channels});
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

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  profiling::Scope profile("dropout");
  require_f32(x, "dropout", "input");
  if (p < 0.0f || p > 1.0f) throw Error("dropout: probability " + std::to_string(p) + " is not in [0, 1]");
  if (!training || p == 0.0f) return x;
  Tensor mask = Tensor::empty(x.shape());
  const float keep_scale = p >= 1.0f ? 0.0f : 1.0f / (1.0f - p);
  for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data()[i] = gen.uniform() >= p ? keep_scale : 0.0f;
  return mul(x, mask);  // the mask's gradient is the mask: mul's backward does it
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  profiling::Scope profile("embedding");
  require_f32(weight, "embedding", "weight");
  if (weight.dim() != 2)
    throw Error("embedding: weight of shape " + shape_text(weight.shape()) + ", expected [num, dim]");
  const std::int64_t num = weight.size(0), dim = weight.size(1);
  const Tensor ic = contiguous_values(indices);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(ic.numel()));
  for (std::int64_t i = 0; i < ic.numel(); ++i) {
    const std::int64_t v = ic.dtype() == DType::i64   ? ic.data_as<std::int64_t>()[i]
                           : ic.dtype() == DType::i32 ? ic.data_as<std::int32_t>()[i]
                                                      : throw Error("embedding: indices must be i32 or i64");
    if (v < 0 || v >= num)
      throw Error("embedding: index " + std::to_string(v) + " at position " + std::to_string(i) +
                  " is out of range [0, " + std::to_string(num) + ")");
    idx[static_cast<std::size_t>(i)] = v;
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  const Tensor wc = contiguous_values(weight);
  Tensor y = Tensor::empty(out_shape);
  for (std::size_t i = 0; i < idx.size(); ++i)
    std::memcpy(y.data() + static_cast<std::int64_t>(i) * dim, wc.data() + idx[i] * dim,
                static_cast<std::size_t>(dim) * sizeof(float));
  autograd::record(y, "embedding", {weight}, [idx, num, dim](const Tensor& g) {
    const Tensor gc = contiguous_values(g);
    Tensor dw = Tensor::zeros({num, dim});
    for (std::size_t i = 0; i < idx.size(); ++i)
      for (std::int64_t j = 0; j < dim; ++j)
        dw.data()[idx[i] * dim + j] += gc.data()[static_cast<std::int64_t>(i) * dim + j];
    return std::vector<Tensor>{dw};
  });
  return y;
}

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  profiling::Scope profile("concat");
  if (tensors.empty()) throw Error("concat: no tensors");
  const Shape& first = tensors[0].shape();
  const std::int64_t d = normalize_dim(dim, static_cast<std::int64_t>(first.size()));
  Shape out_shape = first;
  out_shape[static_cast<std::size_t>(d)] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    require_f32(tensors[i], "concat", "input");
    const Shape& s = tensors[i].shape();
    bool ok = s.size() == first.size();
    for (std::size_t k = 0; ok && k < s.size(); ++k)
      ok = static_cast<std::int64_t>(k) == d || s[k] == first[k];
    if (!ok)
      throw Error("concat: tensor " + std::to_string(i) + " of shape " + shape_text(s) + " does not match " +
                  shape_text(first) + " outside dimension " + std::to_string(d));
    out_shape[static_cast<std::size_t>(d)] += s[static_cast<std::size_t>(d)];
  }
  Tensor out = Tensor::empty(out_shape);
  std::vector<std::int64_t> sizes;
  {
    NoGradGuard no_grad;
    std::int64_t at = 0;
    for (const Tensor& t : tensors) {
      const std::int64_t len = t.size(d);
      copy_strided(t.contiguous(), out.slice(d, at, at + len));
      sizes.push_back(len);
      at += len;
    }
  }
  autograd::record(out, "concat", tensors, [sizes, d](const Tensor& g) {
    std::vector<Tensor> grads;
    std::int64_t at = 0;
    for (std::int64_t len : sizes) {
      grads.push_back(contiguous_values(g.slice(d, at, at + len)));
      at += len;
    }
    return grads;
  });
  return out;
}

}  // namespace cpudl
