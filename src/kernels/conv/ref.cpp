// Portable references of the small-input-channel convolution kernels (conv.h).
#include "kernels/conv/conv.h"

namespace cpudl::kernels {

void f32_conv_backward_weights_nhwc__ref(const ConvWindow& w, const float* x, const float* dy, float* dw,
                                         float* db) {
  const std::size_t ic_n = w.in_channels, oc_n = w.out_channels, oc_pad = conv_padded_channels(oc_n);
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const float* g = dy + (oh * w.out_w + ow) * oc_n;
      if (db)
        for (std::size_t oc = 0; oc < oc_n; ++oc) db[oc] += g[oc];
      for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
        const std::size_t ih = oh * w.stride_h + kh * w.dilation_h;  // padded coordinates
        if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
        for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
          const std::size_t iw = ow * w.stride_w + kw * w.dilation_w;
          if (iw < w.pad_w || iw - w.pad_w >= w.width) continue;
          const float* in = x + ((ih - w.pad_h) * w.width + (iw - w.pad_w)) * ic_n;
          for (std::size_t ic = 0; ic < ic_n; ++ic) {
            float* acc = dw + ((kh * w.kernel_w + kw) * ic_n + ic) * oc_pad;
            for (std::size_t oc = 0; oc < oc_n; ++oc) acc[oc] += in[ic] * g[oc];
          }
        }
      }
    }
}

void f32_conv_forward_planes__ref(const ConvPlanes& p, const float* x, const float* w, const float* bias,
                                  bool relu, float* y) {
  const std::size_t taps = p.in_channels * p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  for (std::size_t oc = 0; oc < p.out_channels; ++oc) {
    const float* wo = w + (oc / 8) * taps * 8 + oc % 8;
    for (std::size_t oh = 0; oh < p.out_h; ++oh)
      for (std::size_t ow = 0; ow < p.out_w; ++ow) {
        float acc = bias[oc];
        for (std::size_t ic = 0; ic < p.in_channels; ++ic)
          for (std::size_t kh = 0; kh < p.kernel_h; ++kh)
            for (std::size_t kw = 0; kw < p.kernel_w; ++kw)
              acc += wo[((ic * p.kernel_h + kh) * p.kernel_w + kw) * 8] *
                     x[ic * p.x_plane + (oh + kh) * p.x_ld + ow + kw];
        y[oc * plane + oh * p.out_w + ow] = relu && acc <= 0.0f ? 0.0f : acc;  // relu(NaN) = NaN
      }
  }
}

void f32_conv_backward_weights_planes__ref(const ConvPlanes& p, const float* x, const float* dy,
                                           const float* y, float* dw, float* db) {
  const std::size_t plane = p.out_h * p.out_w;
  for (std::size_t oc = 0; oc < p.out_channels; ++oc)
    for (std::size_t oh = 0; oh < p.out_h; ++oh)
      for (std::size_t ow = 0; ow < p.out_w; ++ow) {
        const std::size_t at = oc * plane + oh * p.out_w + ow;
        const float g = y && !(y[at] > 0.0f) ? 0.0f : dy[at];
        if (db) db[oc] += g;
        for (std::size_t ic = 0; ic < p.in_channels; ++ic)
          for (std::size_t kh = 0; kh < p.kernel_h; ++kh)
            for (std::size_t kw = 0; kw < p.kernel_w; ++kw)
              dw[((oc * p.in_channels + ic) * p.kernel_h + kh) * p.kernel_w + kw] +=
                  g * x[ic * p.x_plane + (oh + kh) * p.x_ld + ow + kw];
      }
}

void f32_conv_weight_grad_taps__ref(const TapGemmArgs& a) {
  for (std::int64_t r = 0; r < a.row_count; ++r)
    for (std::int64_t p = 0; p < a.pixels; ++p) {
      const float* x = a.x + r * a.x_row + p * a.x_step;
      const float* dy = a.dy + r * a.dy_row + p * a.dy_step;
      for (int i = 0; i < a.rows; ++i)
        for (int j = 0; j < kTapGemmColumns; ++j) a.c[i * kTapGemmColumns + j] += x[i] * dy[j];
    }
}

}  // namespace cpudl::kernels
