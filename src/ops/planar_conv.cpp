// First layers on the planar kernels (planar_conv.h): conv2d's planar path, and conv2d_relu_linear,
// the first layer fused with a narrow classifier.
#include "ops/planar_conv.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "dense/conv/planar_conv.h"
#include "kernels/narrow/narrow.h"
#include "ops/op_helpers.h"
#include "runtime/aligned_buffer.h"
#include "runtime/op_profile.h"

namespace cpudl {
using namespace ops_detail;

namespace {

// The batch padded into planes and the weights packed (dense/conv/planar_conv.h), shared by the
// forward pass and the backward closure.
std::shared_ptr<const conv::PlanarConv> prepare(const onednn::ConvShape& s, const Tensor& x,
                                                const Tensor& weight, const Tensor& bias) {
  onednn::ConvShape planes = s;
  planes.layout = onednn::ActivationLayout::nchw;
  const Tensor xc = contiguous_values(x), wc = contiguous_values(weight);
  const Tensor bc = bias.defined() ? contiguous_values(bias) : Tensor();
  return std::make_shared<const conv::PlanarConv>(planes, xc.data(), wc.data(),
                                                  bc.defined() ? bc.data() : nullptr);
}

// dw and db as tensors from the [OC][taps] + [OC] sums at `at`.
std::vector<Tensor> gradients(const conv::PlanarConv& layer, const float* at, const Shape& weight_shape,
                              bool need_dw, bool need_db) {
  Tensor dw, db;
  const std::size_t weights = layer.channels() * layer.taps();
  if (need_dw) {
    dw = Tensor::empty(weight_shape);
    std::copy(at, at + weights, dw.data());
  }
  if (need_db) {
    db = Tensor::empty({static_cast<std::int64_t>(layer.channels())});
    std::copy(at + weights, at + weights + layer.channels(), db.data());
  }
  return {dw, db};
}

// Images per piece of the fused layer, and output channels per group. The fused layer works a
// group of channels at a time over all of a thread's pieces: the group's slice of the classifier
// weights and of their gradient (2 x 216 KB for SimpleCNN's groups of 8 channels) stays in L2
// while every piece passes, with the piece's activations and their gradients for the group (2 x
// 8 x 21.6 KB). Whole images at a time, the piece (1.4 MB) and the whole weights and gradient
// (1.7 MB) did not fit the 2 MB L2 together, and the weights came back from L3 for every piece
// (SimpleCNN training, `cpudl bench model --train --batch 256`, alternating binaries: 1 thread
// 33.9-34.1K -> 41.7K images/s, 2 threads 63.2K -> 73.5-74.3K). 8 images fill the narrow kernels' row
// blocks (4 in the forward and data gradient, 8 in the weight gradient, whose dw update is then
// amortised over 8 images); 8 channels are one packed block of the planar kernels.
constexpr std::size_t kFusedChannels = 8;
constexpr std::size_t kFusedImages = 8;

}  // namespace

bool ops_detail::planar_first_layer(const onednn::ConvShape& s, const Tensor& x) {
  return conv::planar_shape(s) && !x.requires_grad();
}

// Each image is padded once into a scratch batch that the backward pass reuses. The output is
// NCHW from 16 channels on (SimpleCNN's 32 feed its classifier through flatten in that order);
// fewer (LeNet-5's 6) feed channels-last ops, the native max pool and the next convolution, so
// each image's planes are transposed there from cache, and its gradient back.
Tensor ops_detail::planar_conv2d(const onednn::ConvShape& s, const Tensor& x, const Tensor& weight,
                                 const Tensor& bias, bool relu) {
  const std::shared_ptr<const conv::PlanarConv> layer = prepare(s, x, weight, bias);
  const bool channels_last = s.out_channels < conv::kFewInputChannelsMinOutputs;
  const Shape out_shape = {s.batch, s.out_channels, s.out_height(), s.out_width()};
  Tensor y = channels_last ? empty_channels_last(out_shape) : Tensor::empty(out_shape);
  const std::size_t channels = layer->channels(), plane = layer->plane();
  const auto transpose = native().f32_transpose.fn;
  float* yp = y.data();
  parallel_for(layer->batch(), 1, [&](std::size_t b, std::size_t e) {
    thread_local AlignedBuffer planes;
    for (std::size_t n = b; n < e; ++n) {
      float* out = yp + n * layer->out_image();
      if (!channels_last) {
        layer->forward(n, relu, out);
        continue;
      }
      float* planar = planes.get(layer->out_image());
      layer->forward(n, relu, planar);
      transpose(planar, channels, plane, plane, out, channels);
    }
  });
  count_forward_flops(s.flops());
  const bool need_dw = weight.requires_grad(), need_db = bias.defined() && bias.requires_grad();
  const Tensor saved_y = relu ? y.detach() : Tensor();
  const Shape weight_shape = weight.shape();
  autograd::record(y, "conv2d", {x, weight, bias}, [=](const Tensor& g) {
    if (!need_dw && !need_db) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
    Tensor gc = channels_last ? channels_last_values(g) : contiguous_values(g);
    // Channels-last, the ReLU's mask is applied in that layout first.
    if (relu && channels_last) gc = map_pair_in_layout(native().f32_relu_backward.fn, saved_y, gc);
    const std::size_t per_part = channels * (layer->taps() + 1), out_image = layer->out_image();
    const float *gp = gc.data(), *yp = relu && !channels_last ? saved_y.data() : nullptr;
    const auto transpose = native().f32_transpose.fn;
    const std::vector<float> sums =
        sum_over_images(layer->batch(), per_part, [&](std::size_t n, float* mine) {
          const float* grad = gp + n * out_image;
          if (channels_last) {
            thread_local AlignedBuffer planes;
            float* planar = planes.get(out_image);
            transpose(grad, plane, channels, channels, planar, plane);
            grad = planar;
          }
          layer->backward_weights(n, grad, yp ? yp + n * out_image : nullptr, mine,
                                  need_db ? mine + channels * layer->taps() : nullptr);
        });
    const std::vector<Tensor> wb = gradients(*layer, sums.data(), weight_shape, need_dw, need_db);
    return std::vector<Tensor>{Tensor(), wb[0], wb[1]};
  });
  return y;
}

Tensor conv2d_relu_linear(const Tensor& x, const Tensor& conv_weight, const Tensor& conv_bias,
                          const Conv2dOptions& options, const Tensor& fc_weight, const Tensor& fc_bias) {
  Conv2dOptions o = options;
  o.relu = true;
  const auto unfused = [&] {
    return linear(conv2d(x, conv_weight, conv_bias, o).flatten(1), fc_weight, fc_bias);
  };
  onednn::ConvShape s = conv2d_shape(x, conv_weight, conv_bias, o);
  const std::int64_t features = s.out_channels * s.out_height() * s.out_width();
  if (!planar_first_layer(s, x) || fc_weight.dim() != 2 || fc_weight.dtype() != DType::f32 ||
      fc_weight.size(1) != features ||
      fc_weight.size(0) > static_cast<std::int64_t>(kernels::kNarrowLinearMaxOutputs) ||
      (fc_bias.defined() && (fc_bias.dim() != 1 || fc_bias.size(0) != fc_weight.size(0))))
    return unfused();
  s.validate();
  profiling::Scope profile("conv2d_relu_linear");
  const std::shared_ptr<const conv::PlanarConv> layer = prepare(s, x, conv_weight, conv_bias);
  const Tensor fw = contiguous_values(fc_weight);
  const Tensor fb = fc_bias.defined() ? contiguous_values(fc_bias) : Tensor();
  const std::size_t k = layer->out_image(), outputs = static_cast<std::size_t>(fc_weight.size(0));
  const std::size_t batch = layer->batch(), pieces = (batch + kFusedImages - 1) / kFusedImages;
  Tensor y = Tensor::zeros({s.batch, fc_weight.size(0)});
  const std::size_t channels = layer->channels(), plane = layer->plane();
  {
    float* yp = y.data();
    const auto forward = native().f32_narrow_linear_forward.fn;
    parallel_for(pieces, 1, [&](std::size_t b, std::size_t e) {
      thread_local AlignedBuffer act_buffer;  // whole cache lines: 512-bit loads do not split
      float* act = act_buffer.get(kFusedImages * k);
      float part[kFusedImages * kernels::kNarrowLinearMaxOutputs];
      for (std::size_t c0 = 0; c0 < channels; c0 += kFusedChannels) {
        const std::size_t count = std::min(kFusedChannels, channels - c0), col = c0 * plane;
        for (std::size_t piece = b; piece < e; ++piece) {
          const std::size_t n0 = piece * kFusedImages, n1 = std::min(batch, n0 + kFusedImages);
          for (std::size_t n = n0; n < n1; ++n) layer->forward(n, c0, count, true, act + (n - n0) * k);
          forward(act + col, fw.data() + col, part, n1 - n0, count * plane, outputs, k);
          for (std::size_t i = 0; i < (n1 - n0) * outputs; ++i) yp[n0 * outputs + i] += part[i];
        }
      }
      if (fb.defined())
        for (std::size_t n = b * kFusedImages; n < std::min(batch, e * kFusedImages); ++n)
          for (std::size_t j = 0; j < outputs; ++j) yp[n * outputs + j] += fb.data()[j];
    });
  }
  count_forward_flops(s.flops() + 2.0 * static_cast<double>(batch * k * outputs));
  const bool need_cw = conv_weight.requires_grad(),
             need_cb = conv_bias.defined() && conv_bias.requires_grad();
  const bool need_fw = fc_weight.requires_grad(), need_fb = fc_bias.defined() && fc_bias.requires_grad();
  const Shape conv_shape = conv_weight.shape();
  autograd::record(
      y, "conv2d_relu_linear", {x, conv_weight, conv_bias, fc_weight, fc_bias}, [=](const Tensor& g) {
        const Tensor gc = contiguous_values(g);
        const float* gp = gc.data();
        const std::size_t conv_part = layer->channels() * (layer->taps() + 1);
        const std::size_t fc_part = need_fw ? outputs * k : 0;
        const bool need_conv = need_cw || need_cb;
        const auto data = native().f32_narrow_linear_backward_data.fn;
        const auto weights = native().f32_narrow_linear_backward_weights.fn;
        // Per thread: its pieces, a group of channels at a time (kFusedChannels): the group's
        // activation recomputed, the classifier's weight gradient added (the kernel adds), the
        // activation's gradient formed, masked by the ReLU and folded into the convolution's
        // weight gradient; in a fixed order, so results do not depend on scheduling.
        const auto parts =
            static_cast<std::size_t>(std::max(1, std::min<int>(compute_threads(), static_cast<int>(pieces))));
        const std::vector<float> sums =
            sum_over_images(parts, fc_part + conv_part, [&](std::size_t part, float* mine) {
              thread_local AlignedBuffer act_buffer, grad_buffer;
              float *act = act_buffer.get(kFusedImages * k), *grad = grad_buffer.get(kFusedImages * k);
              float* conv_sums = mine + fc_part;
              float* bias_sums = need_cb ? conv_sums + channels * layer->taps() : nullptr;
              const std::size_t first = pieces * part / parts, last = pieces * (part + 1) / parts;
              for (std::size_t c0 = 0; c0 < channels; c0 += kFusedChannels) {
                const std::size_t count = std::min(kFusedChannels, channels - c0), col = c0 * plane;
                for (std::size_t piece = first; piece < last; ++piece) {
                  const std::size_t n0 = piece * kFusedImages, n1 = std::min(batch, n0 + kFusedImages);
                  for (std::size_t n = n0; n < n1; ++n)
                    layer->forward(n, c0, count, true, act + (n - n0) * k);
                  if (need_fw)
                    weights(act + col, gp + n0 * outputs, mine + col, n1 - n0, count * plane, outputs, k);
                  if (!need_conv) continue;
                  data(gp + n0 * outputs, fw.data() + col, grad + col, n1 - n0, count * plane, outputs, k);
                  for (std::size_t n = n0; n < n1; ++n)
                    layer->backward_weights(n, c0, count, grad + (n - n0) * k, act + (n - n0) * k, conv_sums,
                                            bias_sums);
                }
              }
            });
        const std::vector<Tensor> conv =
            gradients(*layer, sums.data() + fc_part, conv_shape, need_cw, need_cb);
        Tensor dfw, dfb;
        if (need_fw) {
          dfw = Tensor::empty({static_cast<std::int64_t>(outputs), static_cast<std::int64_t>(k)});
          std::copy(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(fc_part), dfw.data());
        }
        if (need_fb) {
          dfb = Tensor::zeros({static_cast<std::int64_t>(outputs)});
          for (std::size_t n = 0; n < batch; ++n)
            for (std::size_t j = 0; j < outputs; ++j) dfb.data()[j] += gp[n * outputs + j];
        }
        return std::vector<Tensor>{Tensor(), conv[0], conv[1], dfw, dfb};
      });
  return y;
}

}  // namespace cpudl
