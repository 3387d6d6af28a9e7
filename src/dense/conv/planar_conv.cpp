// First layers on the planar kernels (planar_conv.h).
#include "dense/conv/planar_conv.h"

#include <algorithm>
#include <cstring>

#include "kernels/conv/conv.h"
#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl::conv {

bool planar_shape(const dense::ConvShape& s) {
  return s.groups == 1 && s.in_channels <= kFewInputChannels && s.stride_h == 1 && s.stride_w == 1 &&
         s.dilation_h == 1 && s.dilation_w == 1 &&
         static_cast<std::size_t>(s.in_channels * s.kernel_h * s.kernel_w) <= kernels::kConvPlanesMaxTaps;
}

PlanarConv::PlanarConv(const dense::ConvShape& s, const float* x, const float* w, const float* bias) {
  const auto oc_n = static_cast<std::size_t>(s.out_channels), ic_n = static_cast<std::size_t>(s.in_channels);
  const auto kh_n = static_cast<std::size_t>(s.kernel_h), kw_n = static_cast<std::size_t>(s.kernel_w);
  const auto out_h = static_cast<std::size_t>(s.out_height()),
             out_w = static_cast<std::size_t>(s.out_width());
  const auto height = static_cast<std::size_t>(s.height), width = static_cast<std::size_t>(s.width);
  const auto pad_h = static_cast<std::size_t>(s.pad_h), pad_w = static_cast<std::size_t>(s.pad_w);
  const std::size_t x_ld = kernels::conv_planes_row(out_w, kw_n), rows = out_h + kh_n - 1;
  p_ = {ic_n, oc_n, out_h, out_w, kh_n, kw_n, x_ld, rows * x_ld};
  batch_ = static_cast<std::size_t>(s.batch);
  taps_ = ic_n * kh_n * kw_n;
  in_image_ = ic_n * p_.x_plane;
  out_image_ = oc_n * out_h * out_w;
  padded_ = AlignedArray(batch_ * in_image_);
  float* dst = padded_.data();
  padded_data_ = dst;
  const bool channels_last = s.layout == dense::ActivationLayout::nhwc;
  const std::size_t in_image = in_image_, x_plane = p_.x_plane;
  parallel_for(batch_, 1, [&](std::size_t b, std::size_t e) {
    for (std::size_t n = b; n < e; ++n)
      for (std::size_t c = 0; c < ic_n; ++c) {
        float* plane = dst + n * in_image + c * x_plane;
        std::fill(plane, plane + x_plane, 0.0f);
        for (std::size_t r = 0; r < height; ++r) {
          float* row = plane + (r + pad_h) * x_ld + pad_w;
          if (!channels_last) {
            std::memcpy(row, x + ((n * ic_n + c) * height + r) * width, width * sizeof(float));
            continue;
          }
          const float* src = x + ((n * height + r) * width) * ic_n + c;
          for (std::size_t col = 0; col < width; ++col) row[col] = src[col * ic_n];
        }
      }
  });
  const std::size_t oc_pad = kernels::conv_padded_channels(oc_n);
  packed_.assign(oc_pad * taps_, 0.0f);
  bias_.assign(oc_pad, 0.0f);
  if (w)  // null for a weight gradient alone, which reads only the padded images
    for (std::size_t oc = 0; oc < oc_n; ++oc)
      for (std::size_t t = 0; t < taps_; ++t)
        packed_[(oc / 8) * taps_ * 8 + t * 8 + oc % 8] = w[oc * taps_ + t];
  if (bias) std::copy(bias, bias + oc_n, bias_.begin());
}

void PlanarConv::forward(std::size_t n, bool relu, float* y) const {
  kernels::kernel_table().f32_conv_forward_planes.fn(p_, padded_data_ + n * in_image_, packed_.data(),
                                                     bias_.data(), relu, y);
}

void PlanarConv::backward_weights(std::size_t n, const float* dy, const float* y, float* dw,
                                  float* db) const {
  kernels::kernel_table().f32_conv_backward_weights_planes.fn(p_, padded_data_ + n * in_image_, dy, y, dw,
                                                              db);
}

void PlanarConv::forward(std::size_t n, std::size_t c0, std::size_t count, bool relu, float* y) const {
  kernels::kernel_table().f32_conv_forward_planes.fn(with_channels(count), padded_data_ + n * in_image_,
                                                     packed_.data() + c0 * taps_, bias_.data() + c0, relu,
                                                     y + c0 * plane());
}

void PlanarConv::backward_weights(std::size_t n, std::size_t c0, std::size_t count, const float* dy,
                                  const float* y, float* dw, float* db) const {
  const std::size_t at = c0 * plane();
  kernels::kernel_table().f32_conv_backward_weights_planes.fn(with_channels(count),
                                                              padded_data_ + n * in_image_, dy + at, y + at,
                                                              dw + c0 * taps_, db ? db + c0 : nullptr);
}

kernels::ConvPlanes PlanarConv::with_channels(std::size_t count) const {
  kernels::ConvPlanes q = p_;
  q.out_channels = count;
  return q;
}

void planar_forward(const dense::ConvShape& s, const float* x, const float* w, const float* bias, bool relu,
                    float* y) {
  const PlanarConv layer(s, x, w, bias);
  const bool channels_last = s.dst_layout.value_or(s.layout) == dense::ActivationLayout::nhwc;
  const auto transpose = kernels::kernel_table().f32_transpose.fn;
  parallel_for(layer.batch(), 1, [&](std::size_t b, std::size_t e) {
    thread_local AlignedBuffer planes;
    for (std::size_t n = b; n < e; ++n) {
      float* out = y + n * layer.out_image();
      if (!channels_last) {
        layer.forward(n, relu, out);
        continue;
      }
      float* planar = planes.get(layer.out_image());
      layer.forward(n, relu, planar);
      transpose(planar, layer.channels(), layer.plane(), layer.plane(), out, layer.channels());
    }
  });
}

void planar_backward_weights(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                             float* db) {
  const PlanarConv layer(s, x, nullptr, nullptr);
  const bool channels_last = s.dst_layout.value_or(s.layout) == dense::ActivationLayout::nhwc;
  const std::size_t weights = layer.channels() * layer.taps();
  const auto transpose = kernels::kernel_table().f32_transpose.fn;
  const std::vector<float> sums =
      sum_over_images(layer.batch(), weights + layer.channels(), [&](std::size_t n, float* mine) {
        const float* grad = dy + n * layer.out_image();
        if (channels_last) {
          thread_local AlignedBuffer planes;
          float* planar = planes.get(layer.out_image());
          transpose(grad, layer.plane(), layer.channels(), layer.channels(), planar, layer.plane());
          grad = planar;
        }
        layer.backward_weights(n, grad, nullptr, mine, db ? mine + weights : nullptr);
      });
  std::copy(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(weights), dw);
  if (db) std::copy(sums.begin() + static_cast<std::ptrdiff_t>(weights), sums.end(), db);
}

}  // namespace cpudl::conv
