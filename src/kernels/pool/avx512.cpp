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

// Whether window tap (kh, kw) of output (oh, ow) lands inside the image; its offset there.
inline bool tap_inside(const PoolWindow& w, std::size_t oh, std::size_t ow, std::size_t kh, std::size_t kw,
                       std::size_t& offset) {
  const std::size_t ih = oh * w.stride_h + kh, iw = ow * w.stride_w + kw;  // padded coordinates
  if (ih < w.pad_h || ih - w.pad_h >= w.height || iw < w.pad_w || iw - w.pad_w >= w.width) return false;
  offset = ((ih - w.pad_h) * w.width + (iw - w.pad_w)) * w.channels;
  return true;
}

}  // namespace

namespace {

// The window's taps inside the image along one dimension: [first, end) of kernel positions.
inline std::size_t first_tap(std::size_t o, std::size_t stride, std::size_t pad) {
  return o * stride < pad ? pad - o * stride : 0;
}
inline std::size_t end_tap(std::size_t o, std::size_t stride, std::size_t pad, std::size_t kernel,
                           std::size_t size) {
  return std::min(kernel, size + pad - o * stride);
}

// Inference (no argmax): VMAXPS keeps the running maximum (it returns its second operand, the
// maximum so far, on a tie or when the new value is NaN: the reference's strict >), and NaN is a
// mask of its own applied at the end. The argmax form's chain per tap (two compares, a mask
// AND-NOT, a blend and a byte blend) made LeNet-5's 6-channel pool a quarter of its inference.
// fn(at, first, rows, cols) for each output pixel: its offset in dst, the first tap of its window
// inside the image and the window's rows and columns there (taps `w.width * w.channels` apart
// down, `w.channels` across); input rows prefetched ahead.
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
      fn((oh * w.out_w + ow) * w.channels, row + (ow * w.stride_w + kw0 - w.pad_w) * w.channels, kh1 - kh0,
         kw1 - kw0);
    }
  }
}

void f32_max_pool_nhwc_values(const PoolWindow& w, const float* src, float* dst) {
  const std::size_t c = w.channels;
  const __m512 nan = _mm512_set1_ps(__builtin_nanf(""));
  const std::size_t down = w.width * c;
  for_each_window(w, src, [&](std::size_t at, const float* first, std::size_t rows, std::size_t cols) {
    for (std::size_t c0 = 0; c0 < c; c0 += 16) {
      const __mmask16 lanes = lanes_mask(c - c0 < 16 ? c - c0 : 16);
      __m512 best = _mm512_set1_ps(-__builtin_inff());
      __mmask16 nans = 0;
      for (std::size_t kh = 0; kh < rows; ++kh)
        for (std::size_t kw = 0; kw < cols; ++kw) {
          const __m512 v = _mm512_maskz_loadu_ps(lanes, first + kh * down + kw * c + c0);
          nans = _mm512_kor(nans, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
          best = _mm512_max_ps(v, best);
        }
      _mm512_mask_storeu_ps(dst + at + c0, lanes, _mm512_mask_mov_ps(best, nans, nan));
    }
  });
}

}  // namespace

void f32_max_pool_nhwc__avx512(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax) {
  if (!argmax) {
    f32_max_pool_nhwc_values(w, src, dst);
    return;
  }
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

// uint8: up to 64 channels per vector under a k-mask, the window's rows and columns clipped to the
// image once per output pixel (padding never wins: every value is >= 0, the start of the max).
void u8_max_pool_nhwc__avx512(const PoolWindow& w, const std::uint8_t* src, std::uint8_t* dst) {
  const std::size_t c = w.channels;
  const std::size_t down = w.width * c;
  for_each_window(w, src, [&](std::size_t at, const std::uint8_t* first, std::size_t rows, std::size_t cols) {
    for (std::size_t c0 = 0; c0 < c; c0 += 64) {
      const __mmask64 lanes = c - c0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (c - c0)) - 1;
      __m512i best = _mm512_setzero_si512();
      for (std::size_t kh = 0; kh < rows; ++kh)
        for (std::size_t kw = 0; kw < cols; ++kw)
          best = _mm512_max_epu8(best, _mm512_maskz_loadu_epi8(lanes, first + kh * down + kw * c + c0));
      _mm512_mask_storeu_epi8(dst + at + c0, lanes, best);
    }
  });
}

// Each input pixel gathers the gradients of the windows whose maximum it was (at most
// ceil(kernel / stride) per dimension: 4 for 3x3/2), added in output order as the reference's
// scatter adds them (so bit-equal, -0 landing as +0 alike), and is written once. The scatter form
// zero-filled diff_src and read-modify-wrote a vector per winning tap, out of L2 at ResNet-18's
// stem (batch 16 at 224x224: 22-30 ms per step against 6.6 for the forward pass).
void f32_max_pool_nhwc_backward__avx512(const PoolWindow& w, const float* diff_dst,
                                        const std::uint8_t* argmax, float* diff_src) {
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
