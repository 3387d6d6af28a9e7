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

#include <algorithm>

#include "kernels/pool/pool.h"

namespace cpudl::kernels {
namespace {

inline __mmask16 lanes_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The window's taps inside the image along one dimension: [first, end) of kernel positions.
inline std::size_t first_tap(std::size_t o, std::size_t stride, std::size_t pad) {
  return o * stride < pad ? pad - o * stride : 0;
}
inline std::size_t end_tap(std::size_t o, std::size_t stride, std::size_t pad, std::size_t kernel,
                           std::size_t size) {
  return std::min(kernel, size + pad - o * stride);
}

// fn(at, first, kh0, rows, kw0, cols) for each output pixel: its offset in dst, the first tap of
// its window inside the image (window position kh0, kw0) and the window's rows and columns there
// (taps `w.width * w.channels` apart down, `w.channels` across); input rows prefetched ahead.
template <class T, class Fn>
void for_each_window(const PoolWindow& w, const T* src, Fn&& fn) {
  for (std::size_t oh = 0; oh < w.out_h; ++oh) {
    prefetch_window_rows_ahead(w, src, oh);
    const std::size_t kh0 = first_tap(oh, w.stride_h, w.pad_h),
                      kh1 = end_tap(oh, w.stride_h, w.pad_h, w.kernel_h, w.height);
    const T* row = src + (oh * w.stride_h + kh0 - w.pad_h) * w.width * w.channels;
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const std::size_t kw0 = first_tap(ow, w.stride_w, w.pad_w),
                        kw1 = end_tap(ow, w.stride_w, w.pad_w, w.kernel_w, w.width);
      fn((oh * w.out_w + ow) * w.channels, row + (ow * w.stride_w + kw0 - w.pad_w) * w.channels, kh0,
         kh1 - kh0, kw0, kw1 - kw0);
    }
  }
}

// The running maximum by VMAXPS, which returns its second operand (the maximum so far) on a tie
// or when the new value is NaN -- the reference's strict > -- with NaN a mask of its own applied at
// the end. Training also keeps the winning tap: updated where a value beats the maximum before any
// NaN, or is the first NaN (NaN wins and stays, as in PyTorch). The former chain per tap (two
// compares, a mask AND-NOT, a blend and a byte blend on the maximum itself) made LeNet-5's
// 6-channel pool a quarter of its inference.
template <bool kArgmax>
void max_pool_f32(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  const std::size_t c = w.channels, down = w.width * c;
  const __m512 nan = _mm512_set1_ps(__builtin_nanf(""));
  for_each_window(
      w, src,
      [&](std::size_t at, const float* first, std::size_t kh0, std::size_t rows, std::size_t kw0,
          std::size_t cols) {
        for (std::size_t c0 = 0; c0 < c; c0 += 16) {
          const __mmask16 lanes = lanes_mask(c - c0 < 16 ? c - c0 : 16);
          __m512 best = _mm512_set1_ps(-__builtin_inff());
          __m128i arg = _mm_setzero_si128();
          __mmask16 nans = 0;
          for (std::size_t kh = 0; kh < rows; ++kh)
            for (std::size_t kw = 0; kw < cols; ++kw) {
              const __m512 v = _mm512_maskz_loadu_ps(lanes, first + kh * down + kw * c + c0);
              const __mmask16 first_nan = _mm512_kandn(nans, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
              if constexpr (kArgmax) {
                const __mmask16 take =
                    _mm512_kor(_mm512_kandn(nans, _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ)), first_nan);
                arg = _mm_mask_mov_epi8(arg, take,
                                        _mm_set1_epi8(static_cast<char>((kh0 + kh) * w.kernel_w + kw0 + kw)));
              }
              nans = _mm512_kor(nans, first_nan);
              best = _mm512_max_ps(v, best);
            }
          _mm512_mask_storeu_ps(dst + at + c0, lanes, _mm512_mask_mov_ps(best, nans, nan));
          if constexpr (kArgmax) _mm_mask_storeu_epi8(argmax + at + c0, lanes, arg);
        }
      });
}

}  // namespace

void f32_max_pool_nhwc__avx512(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  if (argmax)
    max_pool_f32<true>(w, src, dst, argmax);
  else
    max_pool_f32<false>(w, src, dst, nullptr);
}

// uint8: up to 64 channels per vector under a k-mask, the window's rows and columns clipped to the
// image once per output pixel (padding never wins: every value is >= 0, the start of the max).
void u8_max_pool_nhwc__avx512(const PoolWindow& w, const std::uint8_t* src, std::uint8_t* dst) {
  const std::size_t c = w.channels, down = w.width * c;
  for_each_window(w, src,
                  [&](std::size_t at, const std::uint8_t* first, std::size_t, std::size_t rows, std::size_t,
                      std::size_t cols) {
                    for (std::size_t c0 = 0; c0 < c; c0 += 64) {
                      const __mmask64 lanes = c - c0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (c - c0)) - 1;
                      __m512i best = _mm512_setzero_si512();
                      for (std::size_t kh = 0; kh < rows; ++kh)
                        for (std::size_t kw = 0; kw < cols; ++kw)
                          best = _mm512_max_epu8(
                              best, _mm512_maskz_loadu_epi8(lanes, first + kh * down + kw * c + c0));
                      _mm512_mask_storeu_epi8(dst + at + c0, lanes, best);
                    }
                  });
}

namespace {

// Windows that tile the image exactly (stride = kernel, no padding, nothing left over: LeNet-5's
// and VGG's 2x2/2): each input pixel lies in one window, so each window writes its taps -- the
// gradient where the tap won, zero elsewhere -- and every input pixel is written once, with no
// window arithmetic per input pixel. The gather form below spent two integer divisions per input
// pixel and measured slower than the scalar reference for 6 channels (1.57 vs 0.67 ms, LeNet-5's
// pool1 at batch 256). 0 + g, as the reference's zero-fill and add, so -0 lands as +0.
bool tiles_exactly(const PoolWindow& w) {
  return w.pad_h == 0 && w.pad_w == 0 && w.stride_h == w.kernel_h && w.stride_w == w.kernel_w &&
         w.out_h * w.kernel_h == w.height && w.out_w * w.kernel_w == w.width &&
         w.kernel_h * w.kernel_w <= 255;
}

void max_pool_backward_tiled(const PoolWindow& w, const float* diff_dst, const std::uint8_t* argmax,
                             float* diff_src) {
  const std::size_t c = w.channels;
  for (std::size_t oh = 0; oh < w.out_h; ++oh)
    for (std::size_t ow = 0; ow < w.out_w; ++ow) {
      const std::size_t at = (oh * w.out_w + ow) * c;
      float* corner = diff_src + (oh * w.kernel_h * w.width + ow * w.kernel_w) * c;
      for (std::size_t c0 = 0; c0 < c; c0 += 16) {
        const __mmask16 lanes = lanes_mask(c - c0 < 16 ? c - c0 : 16);
        const __m512 g = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(lanes, diff_dst + at + c0));
        const __m128i arg = _mm_maskz_loadu_epi8(lanes, argmax + at + c0);
        for (std::size_t kh = 0; kh < w.kernel_h; ++kh)
          for (std::size_t kw = 0; kw < w.kernel_w; ++kw) {
            const __mmask16 won =
                _mm_mask_cmpeq_epi8_mask(lanes, arg, _mm_set1_epi8(static_cast<char>(kh * w.kernel_w + kw)));
            _mm512_mask_storeu_ps(corner + (kh * w.width + kw) * c + c0, lanes, _mm512_maskz_mov_ps(won, g));
          }
      }
    }
}

}  // namespace

// Each input pixel gathers the gradients of the windows whose maximum it was (at most
// ceil(kernel / stride) per dimension: 4 for 3x3/2), added in output order as the reference's
// scatter adds them (so bit-equal, -0 landing as +0 alike), and is written once. The scatter form
// zero-filled diff_src and read-modify-wrote a vector per winning tap, out of L2 at ResNet-18's
// stem (batch 16 at 224x224: 22-30 ms per step against 6.6 for the forward pass).
void f32_max_pool_nhwc_backward__avx512(const PoolWindow& w, const float* diff_dst,
                                        const std::uint8_t* argmax, float* diff_src) {
  if (tiles_exactly(w)) {
    max_pool_backward_tiled(w, diff_dst, argmax, diff_src);
    return;
  }
  const std::size_t c = w.channels;
  // The windows covering padded coordinate p (input index + pad): o * stride <= p <= o * stride + kernel - 1.
  auto first_window = [](std::size_t p, std::size_t kernel, std::size_t stride) {
    return p + 1 >= kernel ? (p + 1 - kernel + stride - 1) / stride : 0;
  };
  for (std::size_t ih = 0; ih < w.height; ++ih) {
    const std::size_t top = ih + w.pad_h;
    const std::size_t oh_begin = first_window(top, w.kernel_h, w.stride_h);
    const std::size_t oh_end = std::min(w.out_h, top / w.stride_h + 1);
    for (std::size_t iw = 0; iw < w.width; ++iw) {
      const std::size_t left = iw + w.pad_w;
      const std::size_t ow_begin = first_window(left, w.kernel_w, w.stride_w);
      const std::size_t ow_end = std::min(w.out_w, left / w.stride_w + 1);
      float* out = diff_src + (ih * w.width + iw) * c;
      for (std::size_t c0 = 0; c0 < c; c0 += 16) {
        const __mmask16 lanes = lanes_mask(c - c0 < 16 ? c - c0 : 16);
        __m512 sum = _mm512_setzero_ps();
        for (std::size_t oh = oh_begin; oh < oh_end; ++oh)
          for (std::size_t ow = ow_begin; ow < ow_end; ++ow) {
            const std::size_t at = (oh * w.out_w + ow) * c + c0;
            const auto tap =
                static_cast<char>((top - oh * w.stride_h) * w.kernel_w + (left - ow * w.stride_w));
            const __mmask16 won =
                _mm_mask_cmpeq_epi8_mask(lanes, _mm_maskz_loadu_epi8(lanes, argmax + at), _mm_set1_epi8(tap));
            if (won) sum = _mm512_mask_add_ps(sum, won, sum, _mm512_maskz_loadu_ps(won, diff_dst + at));
          }
        _mm512_mask_storeu_ps(out + c0, lanes, sum);
      }
    }
  }
}

}  // namespace cpudl::kernels
