// AVX-512 channels-last max pooling (pool.h): up to 16 channels per vector, the block's lanes
// under a k-mask, so a partial block (LeNet-5's 6 channels) loads, compares and stores exactly
// its channels with no copy through a buffer; the argmax taps are kept as bytes (one 128-bit
// vector per block) and stored as they are. The AVX2 forward's memcpy of a partial block and
// byte-by-byte argmax store took most of its time on 6 channels; masked moves are single
// instructions with AVX-512, on Intel and on AMD Zen 4/5 alike (unlike AVX2's VMASKMOVPS on Zen).
//
// Backward: each tap of a window stores the window's gradient where that tap was the argmax and
// zero elsewhere. Windows that tile the image exactly (stride = kernel, no padding: LeNet-5's
// 2x2/2) write every input position once, so the output needs no zero-fill and no read; otherwise
// (overlap, padding, uncovered edges) it is zero-filled and each tap adds, output pixels in the
// reference's order, so the sums are bit-equal to it.
#include <immintrin.h>

#include <cstring>

#include "kernels/pool/pool.h"

namespace cpudl::kernels {
namespace {

inline __mmask16 lanes_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// Whether window tap (kh, kw) of output (oh, ow) lands inside the image; its offset there.
inline bool tap_inside(const PoolWindow& w, std::size_t oh, std::size_t ow, std::size_t kh, std::size_t kw,
                       std::size_t& offset) {
  const std::size_t ih = oh * w.stride_h + kh, iw = ow * w.stride_w + kw;  // padded coordinates
  if (ih < w.pad_h || ih - w.pad_h >= w.height || iw < w.pad_w || iw - w.pad_w >= w.width) return false;
  offset = ((ih - w.pad_h) * w.width + (iw - w.pad_w)) * w.channels;
  return true;
}

}  // namespace

void f32_max_pool_nhwc__avx512(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  const std::size_t c = w.channels;
  for (std::size_t oh = 0; oh < w.out_h; ++oh) {
    prefetch_window_rows_ahead(w, src, oh);
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const std::size_t at = (oh * w.out_w + ow) * c;
      for (std::size_t c0 = 0; c0 < c; c0 += 16) {
        const __mmask16 lanes = lanes_mask(c - c0 < 16 ? c - c0 : 16);
        __m512 best = _mm512_set1_ps(-__builtin_inff());
        __m128i arg = _mm_setzero_si128();
        for (std::size_t kh = 0; kh < w.kernel_h; ++kh)
          for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
            std::size_t offset;
            if (!tap_inside(w, oh, ow, kh, kw, offset)) continue;
            const __m512 v = _mm512_maskz_loadu_ps(lanes, src + offset + c0);
            // Take v when it is larger or NaN, unless the best so far is NaN (NaN wins and
            // stays, as in PyTorch).
            const __mmask16 take = _mm512_kandn(
                _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q),
                _mm512_kor(_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)));
            best = _mm512_mask_mov_ps(best, take, v);
            arg = _mm_mask_mov_epi8(arg, take, _mm_set1_epi8(static_cast<char>(kh * w.kernel_w + kw)));
          }
        _mm512_mask_storeu_ps(dst + at + c0, lanes, best);
        if (argmax) _mm_mask_storeu_epi8(argmax + at + c0, lanes, arg);
      }
    }
  }
}

void f32_max_pool_nhwc_backward__avx512(const PoolWindow& w, const float* diff_dst,
                                        const std::uint8_t* argmax, float* diff_src) {
  const std::size_t c = w.channels;
  const bool tiles = w.stride_h == w.kernel_h && w.stride_w == w.kernel_w && w.pad_h == 0 && w.pad_w == 0 &&
                     w.out_h * w.stride_h == w.height && w.out_w * w.stride_w == w.width;
  if (!tiles) std::memset(diff_src, 0, w.height * w.width * c * sizeof(float));
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const std::size_t at = (oh * w.out_w + ow) * c;
      for (std::size_t c0 = 0; c0 < c; c0 += 16) {
        const __mmask16 lanes = lanes_mask(c - c0 < 16 ? c - c0 : 16);
        const __m512 g = _mm512_maskz_loadu_ps(lanes, diff_dst + at + c0);
        const __m128i arg = _mm_maskz_loadu_epi8(lanes, argmax + at + c0);
        for (std::size_t kh = 0; kh < w.kernel_h; ++kh)
          for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
            std::size_t offset;
            if (!tap_inside(w, oh, ow, kh, kw, offset)) continue;
            const __mmask16 won =
                _mm_cmpeq_epi8_mask(arg, _mm_set1_epi8(static_cast<char>(kh * w.kernel_w + kw)));
            float* out = diff_src + offset + c0;
            if (tiles) {
              // 0 + g, as the reference's zero-fill and add: a -0 gradient lands as +0 there too.
              _mm512_mask_storeu_ps(out, lanes, _mm512_maskz_add_ps(won, _mm512_setzero_ps(), g));
            } else if (won & lanes) {
              _mm512_mask_storeu_ps(out, won & lanes,
                                    _mm512_add_ps(_mm512_maskz_loadu_ps(won & lanes, out), g));
            }
          }
      }
    }
}

}  // namespace cpudl::kernels
