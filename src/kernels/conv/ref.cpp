// Portable reference of the small-input-channel weight gradient (conv.h).
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

}  // namespace cpudl::kernels
