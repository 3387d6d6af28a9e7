// The convolution's reference passes (reference_conv.h).
#include "dense/conv/reference_conv.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dense/onednn/dense.h"
#include "runtime/parallel.h"

namespace cpudl::conv {

namespace {

// Where element (n, c, h, w) of a C x H x W activation lies in `layout`.
struct Addresser {
  dense::ActivationLayout layout;
  std::int64_t channels, height, width, block;
  std::int64_t operator()(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const {
    switch (layout) {
      case dense::ActivationLayout::nhwc:
        return ((n * height + h) * width + w) * channels + c;
      case dense::ActivationLayout::blocked: {
        const std::int64_t blocks = (channels + block - 1) / block;
        return (((n * blocks + c / block) * height + h) * width + w) * block + c % block;
      }
      case dense::ActivationLayout::nchw:
        break;
    }
    return ((n * channels + c) * height + h) * width + w;
  }
};

Addresser input_of(const dense::ConvShape& s) {
  return {s.layout, s.in_channels, s.height, s.width, onednn::blocked_layout_channels()};
}
Addresser output_of(const dense::ConvShape& s) {
  return {s.dst_layout.value_or(s.layout), s.out_channels, s.out_height(), s.out_width(),
          onednn::blocked_layout_channels()};
}

// Calls tap(ih, iw, kh, kw) for every kernel tap of output (oh, ow) that reads inside the input.
template <class Tap>
void for_each_tap(const dense::ConvShape& s, std::int64_t oh, std::int64_t ow, const Tap& tap) {
  for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
    const std::int64_t ih = oh * s.stride_h - s.pad_h + kh * s.dilation_h;
    if (ih < 0 || ih >= s.height) continue;
    for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
      const std::int64_t iw = ow * s.stride_w - s.pad_w + kw * s.dilation_w;
      if (iw >= 0 && iw < s.width) tap(ih, iw, kh, kw);
    }
  }
}

}  // namespace

void reference_forward(const dense::ConvShape& s, const float* x, const float* w, const float* bias,
                       const dense::ConvEpilogue& epilogue, float* y) {
  const Addresser in = input_of(s), out = output_of(s);
  const std::int64_t icg = s.in_channels / s.groups, ocg = s.out_channels / s.groups;
  parallel_for(static_cast<std::size_t>(s.batch * s.out_channels), 1, [&](std::size_t b, std::size_t e) {
    for (auto i = static_cast<std::int64_t>(b); i < static_cast<std::int64_t>(e); ++i) {
      const std::int64_t n = i / s.out_channels, oc = i % s.out_channels, g = oc / ocg;
      for (std::int64_t oh = 0; oh < s.out_height(); ++oh)
        for (std::int64_t ow = 0; ow < s.out_width(); ++ow) {
          double acc = bias ? bias[oc] : 0.0;
          for_each_tap(s, oh, ow, [&](std::int64_t ih, std::int64_t iw, std::int64_t kh, std::int64_t kw) {
            for (std::int64_t ic = 0; ic < icg; ++ic)
              acc += static_cast<double>(x[in(n, g * icg + ic, ih, iw)]) *
                     w[((oc * icg + ic) * s.kernel_h + kh) * s.kernel_w + kw];
          });
          const std::int64_t at = out(n, oc, oh, ow);
          if (epilogue.residual) acc += epilogue.residual[at];
          float v = static_cast<float>(acc);
          if (epilogue.activation == dense::Activation::relu) v = std::max(v, 0.0f);
          if (epilogue.activation == dense::Activation::clip)
            v = std::min(std::max(v, epilogue.clip_min), epilogue.clip_max);
          if (epilogue.activation == dense::Activation::swish)
            v = static_cast<float>(static_cast<double>(v) / (1.0 + std::exp(-static_cast<double>(v))));
          y[at] = v;
        }
    }
  });
}

void reference_backward_data(const dense::ConvShape& s, const float* dy, const float* w, float* dx) {
  const Addresser in = input_of(s), out = output_of(s);
  const std::int64_t icg = s.in_channels / s.groups, ocg = s.out_channels / s.groups;
  parallel_for(static_cast<std::size_t>(s.batch), 1, [&](std::size_t b, std::size_t e) {
    std::vector<double> acc(static_cast<std::size_t>(s.in_channels * s.height * s.width));
    for (auto n = static_cast<std::int64_t>(b); n < static_cast<std::int64_t>(e); ++n) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t oc = 0; oc < s.out_channels; ++oc)
        for (std::int64_t oh = 0; oh < s.out_height(); ++oh)
          for (std::int64_t ow = 0; ow < s.out_width(); ++ow) {
            const double g = dy[out(n, oc, oh, ow)];
            for_each_tap(s, oh, ow, [&](std::int64_t ih, std::int64_t iw, std::int64_t kh, std::int64_t kw) {
              for (std::int64_t ic = 0; ic < icg; ++ic)
                acc[static_cast<std::size_t>(((oc / ocg * icg + ic) * s.height + ih) * s.width + iw)] +=
                    g * w[((oc * icg + ic) * s.kernel_h + kh) * s.kernel_w + kw];
            });
          }
      for (std::int64_t c = 0; c < s.in_channels; ++c)
        for (std::int64_t h = 0; h < s.height; ++h)
          for (std::int64_t x = 0; x < s.width; ++x)
            dx[in(n, c, h, x)] =
                static_cast<float>(acc[static_cast<std::size_t>((c * s.height + h) * s.width + x)]);
    }
  });
}

void reference_backward_weights(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                                float* db) {
  const Addresser in = input_of(s), out = output_of(s);
  const std::int64_t icg = s.in_channels / s.groups, ocg = s.out_channels / s.groups;
  const std::int64_t taps = icg * s.kernel_h * s.kernel_w;
  parallel_for(static_cast<std::size_t>(s.out_channels), 1, [&](std::size_t b, std::size_t e) {
    std::vector<double> acc(static_cast<std::size_t>(taps));
    for (auto oc = static_cast<std::int64_t>(b); oc < static_cast<std::int64_t>(e); ++oc) {
      std::fill(acc.begin(), acc.end(), 0.0);
      double bias = 0.0;
      const std::int64_t g = oc / ocg;
      for (std::int64_t n = 0; n < s.batch; ++n)
        for (std::int64_t oh = 0; oh < s.out_height(); ++oh)
          for (std::int64_t ow = 0; ow < s.out_width(); ++ow) {
            const double d = dy[out(n, oc, oh, ow)];
            bias += d;
            for_each_tap(s, oh, ow, [&](std::int64_t ih, std::int64_t iw, std::int64_t kh, std::int64_t kw) {
              for (std::int64_t ic = 0; ic < icg; ++ic)
                acc[static_cast<std::size_t>((ic * s.kernel_h + kh) * s.kernel_w + kw)] +=
                    d * x[in(n, g * icg + ic, ih, iw)];
            });
          }
      for (std::int64_t t = 0; t < taps; ++t)
        dw[oc * taps + t] = static_cast<float>(acc[static_cast<std::size_t>(t)]);
      if (db) db[oc] = static_cast<float>(bias);
    }
  });
}

}  // namespace cpudl::conv
