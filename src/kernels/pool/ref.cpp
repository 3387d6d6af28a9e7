// Channels-last max pooling (pool.h): portable loops with the channel loop innermost, which the
// compiler vectorises; there is no ISA variant because the loop is bound by memory, not compute.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/pool/pool.h"

namespace cpudl::kernels {

namespace {

// One output pixel's C channels over its window. Branch-free so the compiler can vectorise and,
// with C a compile-time constant (the small channel counts this kernel exists for), unroll the
// channel loop into registers. NaN wins and stays, as in PyTorch.
template <bool kArgmax, std::size_t kChannels>
void pool_pixel(const PoolWindow& w, const float* src, std::size_t oh, std::size_t ow, std::size_t c_runtime,
                float* out, std::uint8_t* arg) {
  const std::size_t c = kChannels ? kChannels : c_runtime;
  for (std::size_t k = 0; k < c; ++k) out[k] = -std::numeric_limits<float>::infinity();
  if (kArgmax) std::memset(arg, 0, c);
  for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
    const std::size_t ih = oh * w.stride_h + kh;  // padded coordinates: row ih - pad_h
    if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
    for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
      const std::size_t iw = ow * w.stride_w + kw;
      if (iw < w.pad_w || iw - w.pad_w >= w.width) continue;
      const float* in = src + ((ih - w.pad_h) * w.width + (iw - w.pad_w)) * c;
      const auto tap = static_cast<std::uint8_t>(kh * w.kernel_w + kw);
      for (std::size_t k = 0; k < c; ++k) {
        const float v = in[k], best = out[k];
        const bool take = (v > best || v != v) && best == best;
        out[k] = take ? v : best;
        if (kArgmax) arg[k] = take ? tap : arg[k];
      }
    }
  }
}

template <bool kArgmax, std::size_t kChannels>
void pool_image(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  const std::size_t c = w.channels;
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const std::size_t at = (oh * w.out_w + ow) * c;
      pool_pixel<kArgmax, kChannels>(w, src, oh, ow, c, dst + at, kArgmax ? argmax + at : nullptr);
    }
}

template <bool kArgmax>
void pool_image_any(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  switch (w.channels) {
    case 1:
      return pool_image<kArgmax, 1>(w, src, dst, argmax);
    case 2:
      return pool_image<kArgmax, 2>(w, src, dst, argmax);
    case 3:
      return pool_image<kArgmax, 3>(w, src, dst, argmax);
    case 4:
      return pool_image<kArgmax, 4>(w, src, dst, argmax);
    case 5:
      return pool_image<kArgmax, 5>(w, src, dst, argmax);
    case 6:
      return pool_image<kArgmax, 6>(w, src, dst, argmax);
    case 7:
      return pool_image<kArgmax, 7>(w, src, dst, argmax);
    default:
      return pool_image<kArgmax, 0>(w, src, dst, argmax);
  }
}

}  // namespace

void f32_max_pool_nhwc__ref(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  if (argmax)
    pool_image_any<true>(w, src, dst, argmax);
  else
    pool_image_any<false>(w, src, dst, nullptr);
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
