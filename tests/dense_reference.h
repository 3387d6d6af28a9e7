// Direct-loop references for the dense ops (NCHW, OIHW/GOIHW), written for clarity, in double:
// the oracle that oneDNN-backed paths are compared against. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dense/onednn/dense.h"

namespace cpudl::reference {

using onednn::ConvShape;
using onednn::PoolShape;

inline std::size_t nchw(const ConvShape& s, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                        std::int64_t channels, std::int64_t height, std::int64_t width) {
  (void)s;
  return static_cast<std::size_t>(((n * channels + c) * height + h) * width + w);
}

// Calls fn(n, oc, oh, ow, ic, kh, kw, ih, iw) for every tap that lands inside the input.
template <class Fn>
void for_each_conv_tap(const ConvShape& s, Fn fn) {
  const std::int64_t ocg = s.out_channels / s.groups, icg = s.in_channels / s.groups;
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t oc = 0; oc < s.out_channels; ++oc)
      for (std::int64_t oh = 0; oh < s.out_height(); ++oh)
        for (std::int64_t ow = 0; ow < s.out_width(); ++ow)
          for (std::int64_t icl = 0; icl < icg; ++icl)
            for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
              for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const std::int64_t ih = oh * s.stride_h - s.pad_h + kh * s.dilation_h;
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw * s.dilation_w;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                const std::int64_t ic = (oc / ocg) * icg + icl;
                fn(n, oc, oh, ow, ic, icl, kh, kw, ih, iw);
              }
}

inline std::size_t weight_index(const ConvShape& s, std::int64_t oc, std::int64_t icl, std::int64_t kh,
                                std::int64_t kw) {
  const std::int64_t icg = s.in_channels / s.groups;
  return static_cast<std::size_t>(((oc * icg + icl) * s.kernel_h + kh) * s.kernel_w + kw);
}

inline std::vector<float> conv2d_forward(const ConvShape& s, const std::vector<float>& x,
                                         const std::vector<float>& w, const std::vector<float>* bias) {
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::vector<double> y(static_cast<std::size_t>(s.batch * s.out_channels * oh * ow), 0.0);
  for_each_conv_tap(
      s, [&](auto n, auto oc, auto h, auto wo, auto ic, auto icl, auto kh, auto kw, auto ih, auto iw) {
        y[nchw(s, n, oc, h, wo, s.out_channels, oh, ow)] +=
            static_cast<double>(x[nchw(s, n, ic, ih, iw, s.in_channels, s.height, s.width)]) *
            w[weight_index(s, oc, icl, kh, kw)];
      });
  std::vector<float> out(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const auto oc = static_cast<std::size_t>((static_cast<std::int64_t>(i) / (oh * ow)) % s.out_channels);
    out[i] = static_cast<float>(y[i] + (bias ? (*bias)[oc] : 0.0));
  }
  return out;
}

inline std::vector<float> conv2d_backward_data(const ConvShape& s, const std::vector<float>& dy,
                                               const std::vector<float>& w) {
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::vector<double> dx(static_cast<std::size_t>(s.batch * s.in_channels * s.height * s.width), 0.0);
  for_each_conv_tap(
      s, [&](auto n, auto oc, auto h, auto wo, auto ic, auto icl, auto kh, auto kw, auto ih, auto iw) {
        dx[nchw(s, n, ic, ih, iw, s.in_channels, s.height, s.width)] +=
            static_cast<double>(dy[nchw(s, n, oc, h, wo, s.out_channels, oh, ow)]) *
            w[weight_index(s, oc, icl, kh, kw)];
      });
  return std::vector<float>(dx.begin(), dx.end());
}

inline std::vector<float> conv2d_backward_weights(const ConvShape& s, const std::vector<float>& x,
                                                  const std::vector<float>& dy, std::vector<float>* dbias) {
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::vector<double> dw(
      static_cast<std::size_t>(s.out_channels * (s.in_channels / s.groups) * s.kernel_h * s.kernel_w));
  for_each_conv_tap(
      s, [&](auto n, auto oc, auto h, auto wo, auto ic, auto icl, auto kh, auto kw, auto ih, auto iw) {
        dw[weight_index(s, oc, icl, kh, kw)] +=
            static_cast<double>(dy[nchw(s, n, oc, h, wo, s.out_channels, oh, ow)]) *
            x[nchw(s, n, ic, ih, iw, s.in_channels, s.height, s.width)];
      });
  if (dbias) {
    dbias->assign(static_cast<std::size_t>(s.out_channels), 0.0f);
    std::vector<double> acc(dbias->size(), 0.0);
    for (std::size_t i = 0; i < dy.size(); ++i)
      acc[static_cast<std::size_t>((static_cast<std::int64_t>(i) / (oh * ow)) % s.out_channels)] += dy[i];
    std::copy(acc.begin(), acc.end(), dbias->begin());
  }
  return std::vector<float>(dw.begin(), dw.end());
}

// Pooling: returns the output, and for max pooling the flat input index each output came from.
inline std::vector<float> pool2d_forward(const PoolShape& s, const std::vector<float>& x,
                                         std::vector<std::size_t>* argmax) {
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::vector<float> y(static_cast<std::size_t>(s.batch * s.channels * oh * ow));
  if (argmax) argmax->assign(y.size(), 0);
  std::size_t o = 0;
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t c = 0; c < s.channels; ++c)
      for (std::int64_t h = 0; h < oh; ++h)
        for (std::int64_t w = 0; w < ow; ++w, ++o) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          std::size_t best_at = 0;
          std::int64_t inside = 0;
          for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
            for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
              const std::int64_t ih = h * s.stride_h - s.pad_h + kh, iw = w * s.stride_w - s.pad_w + kw;
              if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
              const auto i = static_cast<std::size_t>(((n * s.channels + c) * s.height + ih) * s.width + iw);
              ++inside;
              sum += x[i];
              if (x[i] > best) {
                best = x[i];
                best_at = i;
              }
            }
          if (s.kind == onednn::PoolKind::max) {
            y[o] = static_cast<float>(best);
            if (argmax) (*argmax)[o] = best_at;
          } else {
            const double count = s.kind == onednn::PoolKind::avg_include_padding
                                     ? static_cast<double>(s.kernel_h * s.kernel_w)
                                     : static_cast<double>(inside);
            y[o] = static_cast<float>(sum / count);
          }
        }
  return y;
}

inline std::vector<float> pool2d_backward(const PoolShape& s, const std::vector<float>& x,
                                          const std::vector<float>& dy) {
  std::vector<float> dx(x.size(), 0.0f);
  std::vector<std::size_t> argmax;
  pool2d_forward(s, x, &argmax);
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::size_t o = 0;
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t c = 0; c < s.channels; ++c)
      for (std::int64_t h = 0; h < oh; ++h)
        for (std::int64_t w = 0; w < ow; ++w, ++o) {
          if (s.kind == onednn::PoolKind::max) {
            dx[argmax[o]] += dy[o];
            continue;
          }
          std::int64_t inside = 0;
          for (int pass = 0; pass < 2; ++pass)
            for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
              for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const std::int64_t ih = h * s.stride_h - s.pad_h + kh, iw = w * s.stride_w - s.pad_w + kw;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                if (pass == 0) {
                  ++inside;
                  continue;
                }
                const double count = s.kind == onednn::PoolKind::avg_include_padding
                                         ? static_cast<double>(s.kernel_h * s.kernel_w)
                                         : static_cast<double>(inside);
                dx[static_cast<std::size_t>(((n * s.channels + c) * s.height + ih) * s.width + iw)] +=
                    static_cast<float>(dy[o] / count);
              }
        }
  return dx;
}

}  // namespace cpudl::reference
