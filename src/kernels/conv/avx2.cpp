// AVX2 small-input-channel weight gradient (conv.h): for each tap and input channel, a run of
// output pixels along one row accumulates into up to four OC vectors held in registers.
#include <immintrin.h>

#include "kernels/conv/conv.h"

namespace cpudl::kernels {
namespace {

// Output columns [begin, end) whose tap kw lands inside the image.
inline void valid_columns(const ConvWindow& w, std::size_t kw, std::size_t& begin, std::size_t& end) {
  const std::size_t offset = kw * w.dilation_w;  // padded column of ow = 0
  begin = offset >= w.pad_w ? 0 : (w.pad_w - offset + w.stride_w - 1) / w.stride_w;
  // iw = ow * stride + offset - pad < width  <=>  ow * stride < width + pad - offset
  const std::size_t limit = w.width + w.pad_w;
  end = offset >= limit ? 0 : (limit - offset + w.stride_w - 1) / w.stride_w;
  if (end > w.out_w) end = w.out_w;
  if (begin > end) begin = end;
}

// acc[0..NV) += x[ow] * dy[ow][v0 * 8 .. +NV * 8) over the output columns [begin, end) of one row,
// NV a constant so that the accumulators stay in registers. The last pixel of an image with a
// partial last vector would read past dy: the caller passes `masked_last` and that pixel takes
// the masked load (microcoded on AMD Zen, so only there).
template <std::size_t NV>
void accumulate_row(const float* x_col0, std::ptrdiff_t x_step, const float* g0, std::size_t oc_n,
                    std::size_t begin, std::size_t end, bool masked_last, __m256i tail_mask, float* acc_out) {
  __m256 acc[NV];
  for (std::size_t v = 0; v < NV; ++v) acc[v] = _mm256_loadu_ps(acc_out + v * 8);
  const std::size_t plain_end = masked_last ? end - 1 : end;
  for (std::size_t ow = begin; ow < plain_end; ++ow) {
    const __m256 xv = _mm256_broadcast_ss(x_col0 + static_cast<std::ptrdiff_t>(ow) * x_step);
    const float* g = g0 + ow * oc_n;
    for (std::size_t v = 0; v < NV; ++v) acc[v] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(g + v * 8), acc[v]);
  }
  if (masked_last && begin < end) {
    const std::size_t ow = end - 1;
    const __m256 xv = _mm256_broadcast_ss(x_col0 + static_cast<std::ptrdiff_t>(ow) * x_step);
    const float* g = g0 + ow * oc_n;
    for (std::size_t v = 0; v + 1 < NV; ++v) acc[v] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(g + v * 8), acc[v]);
    acc[NV - 1] = _mm256_fmadd_ps(xv, _mm256_maskload_ps(g + (NV - 1) * 8, tail_mask), acc[NV - 1]);
  }
  for (std::size_t v = 0; v < NV; ++v) _mm256_storeu_ps(acc_out + v * 8, acc[v]);
}

}  // namespace

void f32_conv_backward_weights_nhwc__avx2(const ConvWindow& w, const float* x, const float* dy, float* dw,
                                          float* db) {
  const std::size_t ic_n = w.in_channels, oc_n = w.out_channels, oc_pad = conv_padded_channels(oc_n);
  const std::size_t vectors = oc_pad / 8, pixels = w.out_h * w.out_w;
  const bool partial = oc_n % 8 != 0;
  const __m256i tail_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(partial ? oc_n % 8 : 8)),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  if (db) {
    for (std::size_t v = 0; v < vectors; ++v) {
      __m256 acc = _mm256_loadu_ps(db + v * 8);
      const bool last_partial = partial && v + 1 == vectors;
      for (std::size_t p = 0; p + (last_partial ? 1 : 0) < pixels; ++p)
        acc = _mm256_add_ps(acc, _mm256_loadu_ps(dy + p * oc_n + v * 8));
      if (last_partial)
        acc = _mm256_add_ps(acc, _mm256_maskload_ps(dy + (pixels - 1) * oc_n + v * 8, tail_mask));
      _mm256_storeu_ps(db + v * 8, acc);
    }
  }
  for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
    std::size_t ow_begin, ow_end;
    valid_columns(w, kw, ow_begin, ow_end);
    if (ow_begin >= ow_end) continue;
    const std::ptrdiff_t col0 =
        static_cast<std::ptrdiff_t>(kw * w.dilation_w) - static_cast<std::ptrdiff_t>(w.pad_w);
    const auto x_step = static_cast<std::ptrdiff_t>(w.stride_w * ic_n);
    for (std::size_t oh = 0; oh < w.out_h; ++oh) {
      const float* g_row = dy + oh * w.out_w * oc_n;
      // Only the image's last pixel can read past dy, and only through a partial last vector.
      const bool last_pixel_here = oh + 1 == w.out_h && ow_end == w.out_w;
      for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
        const std::size_t ih = oh * w.stride_h + kh * w.dilation_h;  // padded coordinates
        if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
        const float* x_row = x + (ih - w.pad_h) * w.width * ic_n;
        for (std::size_t ic = 0; ic < ic_n; ++ic) {
          const float* x_col0 =
              x_row + col0 * static_cast<std::ptrdiff_t>(ic_n) + static_cast<std::ptrdiff_t>(ic);
          float* acc_out = dw + ((kh * w.kernel_w + kw) * ic_n + ic) * oc_pad;
          for (std::size_t v0 = 0; v0 < vectors; v0 += 4) {
            const std::size_t nv = vectors - v0 < 4 ? vectors - v0 : 4;
            const bool masked_last = last_pixel_here && partial && v0 + nv == vectors;
            const float* g0 = g_row + v0 * 8;
            float* out = acc_out + v0 * 8;
            switch (nv) {
              case 1:
                accumulate_row<1>(x_col0, x_step, g0, oc_n, ow_begin, ow_end, masked_last, tail_mask, out);
                break;
              case 2:
                accumulate_row<2>(x_col0, x_step, g0, oc_n, ow_begin, ow_end, masked_last, tail_mask, out);
                break;
              case 3:
                accumulate_row<3>(x_col0, x_step, g0, oc_n, ow_begin, ow_end, masked_last, tail_mask, out);
                break;
              default:
                accumulate_row<4>(x_col0, x_step, g0, oc_n, ow_begin, ow_end, masked_last, tail_mask, out);
                break;
            }
          }
        }
      }
    }
  }
}

}  // namespace cpudl::kernels
