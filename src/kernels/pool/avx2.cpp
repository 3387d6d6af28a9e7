// AVX2 channels-last max pooling (pool.h): eight channels per vector, so LeNet-5's 6 channels are
// one vector per tap. A partial block loads 8 floats anyway where the image has them (the extra
// lanes are discarded) and uses VMASKMOVPS only at the image's end: masked loads and stores are
// microcoded on AMD Zen and made this loop 10x slower when used for every tap.
#include <immintrin.h>

#include <cstring>

#include "kernels/pool/pool.h"

namespace cpudl::kernels {
namespace {

// Lanes [0, n) set, n <= 8.
inline __m256i lane_mask(std::size_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index);
}

}  // namespace

void f32_max_pool_nhwc__avx2(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  const std::size_t c = w.channels;
  const float* src_end = src + w.height * w.width * c;
  for (std::size_t oh = 0; oh < w.out_h; ++oh) {
    prefetch_window_rows_ahead(w, src, oh);
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const std::size_t at = (oh * w.out_w + ow) * c;
      for (std::size_t c0 = 0; c0 < c; c0 += 8) {
        const std::size_t lanes = c - c0 < 8 ? c - c0 : 8;
        const __m256i mask = lane_mask(lanes);
        __m256 best = _mm256_set1_ps(-__builtin_inff());
        __m256i arg = _mm256_setzero_si256();
        for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
          const std::size_t ih = oh * w.stride_h + kh;  // padded coordinates: row ih - pad_h
          if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
          for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
            const std::size_t iw = ow * w.stride_w + kw;
            if (iw < w.pad_w || iw - w.pad_w >= w.width) continue;
            const float* in = src + ((ih - w.pad_h) * w.width + (iw - w.pad_w)) * c + c0;
            const __m256 v = in + 8 <= src_end ? _mm256_loadu_ps(in) : _mm256_maskload_ps(in, mask);
            // Take v when it is larger or NaN, unless the best so far is NaN (NaN wins and stays,
            // as in PyTorch).
            const __m256 take = _mm256_andnot_ps(
                _mm256_cmp_ps(best, best, _CMP_UNORD_Q),
                _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
            best = _mm256_blendv_ps(best, v, take);
            arg = _mm256_blendv_epi8(arg, _mm256_set1_epi32(static_cast<int>(kh * w.kernel_w + kw)),
                                     _mm256_castps_si256(take));
          }
        }
        if (lanes == 8) {
          _mm256_storeu_ps(dst + at + c0, best);
        } else {
          alignas(32) float values[8];
          _mm256_store_ps(values, best);
          std::memcpy(dst + at + c0, values, lanes * sizeof(float));
        }
        if (argmax) {
          alignas(32) std::int32_t taps[8];
          _mm256_store_si256(reinterpret_cast<__m256i*>(taps), arg);
          for (std::size_t k = 0; k < lanes; ++k) argmax[at + c0 + k] = static_cast<std::uint8_t>(taps[k]);
        }
      }
    }
  }
}

}  // namespace cpudl::kernels
