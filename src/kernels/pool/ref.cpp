// Channels-last max pooling (pool.h): the portable reference, plain loops over the window.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/pool/pool.h"

namespace cpudl::kernels {

void f32_max_pool_nhwc__ref(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  const std::size_t c = w.channels;
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      float* out = dst + (oh * w.out_w + ow) * c;
      std::uint8_t* arg = argmax ? argmax + (oh * w.out_w + ow) * c : nullptr;
      for (std::size_t k = 0; k < c; ++k) out[k] = -std::numeric_limits<float>::infinity();
      if (arg) std::memset(arg, 0, c);
      for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
        const std::size_t ih = oh * w.stride_h + kh;  // padded coordinates: row ih - pad_h
        if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
        for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
          const std::size_t iw = ow * w.stride_w + kw;
          if (iw < w.pad_w || iw - w.pad_w >= w.width) continue;
          const float* in = src + ((ih - w.pad_h) * w.width + (iw - w.pad_w)) * c;
          for (std::size_t k = 0; k < c; ++k) {
            // NaN wins and stays, as in PyTorch.
            const bool take = (in[k] > out[k] || std::isnan(in[k])) && !std::isnan(out[k]);
            if (!take) continue;
            out[k] = in[k];
            if (arg) arg[k] = static_cast<std::uint8_t>(kh * w.kernel_w + kw);
          }
        }
      }
    }
}

void u8_max_pool_nhwc__ref(const PoolWindow& w, const std::uint8_t* src, std::uint8_t* dst) {
  const std::size_t c = w.channels;
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow)
      for (std::size_t k = 0; k < c; ++k) {
        std::uint8_t best = 0;  // the smallest value: every window holds a tap inside the image
        for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
          const std::size_t ih = oh * w.stride_h + kh;
          if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
          for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
            const std::size_t iw = ow * w.stride_w + kw;
            if (iw < w.pad_w || iw - w.pad_w >= w.width) continue;
            best = std::max(best, src[((ih - w.pad_h) * w.width + (iw - w.pad_w)) * c + k]);
          }
        }
        dst[(oh * w.out_w + ow) * c + k] = best;
      }
}

void f32_max_pool_nhwc_backward__ref(const PoolWindow& w, const float* diff_dst, const std::uint8_t* argmax,
                                     float* diff_src) {
  const std::size_t c = w.channels;
  std::memset(diff_src, 0, w.height * w.width * c * sizeof(float));
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const float* g = diff_dst + (oh * w.out_w + ow) * c;
      const std::uint8_t* arg = argmax + (oh * w.out_w + ow) * c;
      for (std::size_t k = 0; k < c; ++k) {
        const std::size_t ih = oh * w.stride_h + arg[k] / w.kernel_w - w.pad_h;
        const std::size_t iw = ow * w.stride_w + arg[k] % w.kernel_w - w.pad_w;
        diff_src[(ih * w.width + iw) * c + k] += g[k];
      }
    }
}

}  // namespace cpudl::kernels
