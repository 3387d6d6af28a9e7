// AVX2 small-input-channel weight gradient (conv.h): along each output row, blocks of taps share
// each pixel's gradient vectors, accumulating in registers; the columns where only some taps of a
// block land inside the image go one tap at a time.
#include <immintrin.h>

#include <utility>

#include "kernels/conv/conv.h"
#include "kernels/simd/avx2.inl"

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

// KB taps (kw = k0 .. k0 + KB - 1) at once over output columns where all of them land inside the
// image: the NV gradient vectors of a pixel are loaded once and used by every tap, so a tap
// costs a broadcast and NV FMAs instead of NV loads and NV FMAs. KB * NV <= 8-10 accumulators.
template <std::size_t NV, std::size_t KB>
void accumulate_row_taps(const float* x_col0, std::ptrdiff_t x_step, std::ptrdiff_t tap_step, const float* g0,
                         std::size_t oc_n, std::size_t begin, std::size_t end, float* acc_out,
                         std::size_t acc_tap_stride) {
  __m256 acc[KB][NV];
  for (std::size_t k = 0; k < KB; ++k)
    for (std::size_t v = 0; v < NV; ++v) acc[k][v] = _mm256_loadu_ps(acc_out + k * acc_tap_stride + v * 8);
  for (std::size_t ow = begin; ow < end; ++ow) {
    const float* g = g0 + ow * oc_n;
    __m256 gv[NV];
    for (std::size_t v = 0; v < NV; ++v) gv[v] = _mm256_loadu_ps(g + v * 8);
    const float* xp = x_col0 + static_cast<std::ptrdiff_t>(ow) * x_step;
    for (std::size_t k = 0; k < KB; ++k) {
      const __m256 xv = _mm256_broadcast_ss(xp + static_cast<std::ptrdiff_t>(k) * tap_step);
      for (std::size_t v = 0; v < NV; ++v) acc[k][v] = _mm256_fmadd_ps(xv, gv[v], acc[k][v]);
    }
  }
  for (std::size_t k = 0; k < KB; ++k)
    for (std::size_t v = 0; v < NV; ++v) _mm256_storeu_ps(acc_out + k * acc_tap_stride + v * 8, acc[k][v]);
}

// Taps per block for NV vectors: accumulators + NV gradient registers + a broadcast <= 16.
constexpr std::size_t max_taps(std::size_t nv) { return nv == 1 ? 8 : nv == 2 ? 5 : nv == 3 ? 3 : 2; }

using TapsFn = void (*)(const float*, std::ptrdiff_t, std::ptrdiff_t, const float*, std::size_t, std::size_t,
                        std::size_t, float*, std::size_t);
template <std::size_t NV, std::size_t... KB>
constexpr TapsFn pick_taps(std::size_t kb, std::index_sequence<KB...>) {
  TapsFn fn = nullptr;
  ((fn = kb == KB + 1 ? &accumulate_row_taps<NV, KB + 1> : fn), ...);
  return fn;
}
TapsFn taps_kernel(std::size_t nv, std::size_t kb) {
  switch (nv) {
    case 1:
      return pick_taps<1>(kb, std::make_index_sequence<max_taps(1)>());
    case 2:
      return pick_taps<2>(kb, std::make_index_sequence<max_taps(2)>());
    case 3:
      return pick_taps<3>(kb, std::make_index_sequence<max_taps(3)>());
    default:
      return pick_taps<4>(kb, std::make_index_sequence<max_taps(4)>());
  }
}

using RowFn = void (*)(const float*, std::ptrdiff_t, const float*, std::size_t, std::size_t, std::size_t,
                       bool, __m256i, float*);
RowFn row_kernel(std::size_t nv) {
  switch (nv) {
    case 1:
      return &accumulate_row<1>;
    case 2:
      return &accumulate_row<2>;
    case 3:
      return &accumulate_row<3>;
    default:
      return &accumulate_row<4>;
  }
}

// out[0 .. NV * 8) += the sum over `pixels` rows (stride oc_n) of g[0 .. NV * 8); with guard_last
// the last row's last vector is a masked load (it may end past dy).
template <std::size_t NV>
void sum_block(const float* g, std::size_t oc_n, std::size_t pixels, bool guard_last, __m256i tail_mask,
               float* out) {
  __m256 acc[NV];
  for (std::size_t v = 0; v < NV; ++v) acc[v] = _mm256_loadu_ps(out + v * 8);
  const std::size_t plain = guard_last ? pixels - 1 : pixels;
  for (std::size_t p = 0; p < plain; ++p)
    for (std::size_t v = 0; v < NV; ++v)
      acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(g + p * oc_n + v * 8));
  if (guard_last && pixels > 0) {
    const float* last = g + (pixels - 1) * oc_n;
    for (std::size_t v = 0; v + 1 < NV; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(last + v * 8));
    acc[NV - 1] = _mm256_add_ps(acc[NV - 1], _mm256_maskload_ps(last + (NV - 1) * 8, tail_mask));
  }
  for (std::size_t v = 0; v < NV; ++v) _mm256_storeu_ps(out + v * 8, acc[v]);
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
    // Pixel by pixel, whole vectors of a pixel together: one sequential pass over dy (the first
    // one, so it runs at memory speed; a vector-major order strided through it 4x slower).
    for (std::size_t v0 = 0; v0 < vectors; v0 += 4) {
      const std::size_t nv = vectors - v0 < 4 ? vectors - v0 : 4;
      const bool guard_last = partial && v0 + nv == vectors;
      switch (nv) {
        case 1:
          sum_block<1>(dy + v0 * 8, oc_n, pixels, guard_last, tail_mask, db + v0 * 8);
          break;
        case 2:
          sum_block<2>(dy + v0 * 8, oc_n, pixels, guard_last, tail_mask, db + v0 * 8);
          break;
        case 3:
          sum_block<3>(dy + v0 * 8, oc_n, pixels, guard_last, tail_mask, db + v0 * 8);
          break;
        default:
          sum_block<4>(dy + v0 * 8, oc_n, pixels, guard_last, tail_mask, db + v0 * 8);
          break;
      }
    }
  }
  std::size_t col_begin[64], col_end[64];  // per tap kw: output columns where it lands inside
  if (w.kernel_w > 64) {
    f32_conv_backward_weights_nhwc__ref(w, x, dy, dw, db);
    return;
  }
  for (std::size_t kw = 0; kw < w.kernel_w; ++kw) valid_columns(w, kw, col_begin[kw], col_end[kw]);
  const auto x_step = static_cast<std::ptrdiff_t>(w.stride_w * ic_n);
  const auto tap_step = static_cast<std::ptrdiff_t>(w.dilation_w * ic_n);
  const std::size_t acc_tap_stride = ic_n * oc_pad;
  for (std::size_t oh = 0; oh < w.out_h; ++oh) {
    const float* g_row = dy + oh * w.out_w * oc_n;
    const bool last_row = oh + 1 == w.out_h;
    for (std::size_t kh = 0; kh < w.kernel_h; ++kh) {
      const std::size_t ih = oh * w.stride_h + kh * w.dilation_h;  // padded coordinates
      if (ih < w.pad_h || ih - w.pad_h >= w.height) continue;
      const float* x_row = x + (ih - w.pad_h) * w.width * ic_n;
      for (std::size_t ic = 0; ic < ic_n; ++ic) {
        for (std::size_t v0 = 0; v0 < vectors; v0 += 4) {
          const std::size_t nv = vectors - v0 < 4 ? vectors - v0 : 4;
          // Only the image's last pixel can read past dy, through a partial last vector.
          const bool guard_last = last_row && partial && v0 + nv == vectors;
          const float* g0 = g_row + v0 * 8;
          for (std::size_t k0 = 0; k0 < w.kernel_w; k0 += max_taps(nv)) {
            const std::size_t k1 = k0 + max_taps(nv) < w.kernel_w ? k0 + max_taps(nv) : w.kernel_w;
            std::size_t inner_begin = 0, inner_end = w.out_w;  // columns valid for every tap of the block
            for (std::size_t k = k0; k < k1; ++k) {
              inner_begin = col_begin[k] > inner_begin ? col_begin[k] : inner_begin;
              inner_end = col_end[k] < inner_end ? col_end[k] : inner_end;
            }
            if (guard_last && inner_end == w.out_w) --inner_end;
            if (inner_begin > inner_end) inner_begin = inner_end;
            float* acc0 = dw + ((kh * w.kernel_w + k0) * ic_n + ic) * oc_pad + v0 * 8;
            const float* x_col0 =
                x_row +
                (static_cast<std::ptrdiff_t>(k0 * w.dilation_w) - static_cast<std::ptrdiff_t>(w.pad_w)) *
                    static_cast<std::ptrdiff_t>(ic_n) +
                static_cast<std::ptrdiff_t>(ic);
            if (inner_begin < inner_end)
              taps_kernel(nv, k1 - k0)(x_col0, x_step, tap_step, g0, oc_n, inner_begin, inner_end, acc0,
                                       acc_tap_stride);
            // Each tap's columns outside the shared range, one tap at a time.
            for (std::size_t k = k0; k < k1; ++k) {
              const float* xk = x_col0 + static_cast<std::ptrdiff_t>(k - k0) * tap_step;
              float* acck = acc0 + (k - k0) * acc_tap_stride;
              const RowFn row = row_kernel(nv);
              const std::size_t left_end = inner_begin < col_end[k] ? inner_begin : col_end[k];
              if (col_begin[k] < left_end)
                row(xk, x_step, g0, oc_n, col_begin[k], left_end, guard_last && left_end == w.out_w,
                    tail_mask, acck);
              const std::size_t right_begin = inner_end > col_begin[k] ? inner_end : col_begin[k];
              if (right_begin < col_end[k])
                row(xk, x_step, g0, oc_n, right_begin, col_end[k], guard_last && col_end[k] == w.out_w,
                    tail_mask, acck);
            }
          }
        }
      }
    }
  }
}

namespace {

// acc[t] += sum over the (zero-padded) gradient rows of g * x shifted by tap t's offset, for the
// TB taps of one block: each gradient vector is loaded once and used by every tap of the block.
template <std::size_t TB>
void planes_taps_block(const float* g, std::size_t rows, std::size_t g_ld, const float* x, std::size_t x_ld,
                       const std::size_t* offsets, float* dw) {
  __m256 acc[TB];
#pragma GCC unroll 16
  for (std::size_t t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* gr = g + r * g_ld;
    const float* xr = x + r * x_ld;
    for (std::size_t c = 0; c < g_ld; c += 8) {
      const __m256 gv = _mm256_loadu_ps(gr + c);
#pragma GCC unroll 16
      for (std::size_t t = 0; t < TB; ++t)
        acc[t] = _mm256_fmadd_ps(gv, _mm256_loadu_ps(xr + offsets[t] + c), acc[t]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t t = 0; t < TB; ++t) dw[t] += Avx2::reduce_add(acc[t]);
}

// Taps per block: TB accumulators + the gradient vector + one x load fit the 16 registers.
constexpr std::size_t kPlanesMaxTapBlock = 12;
using PlanesTapsFn = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t,
                              const std::size_t*, float*);
template <std::size_t... TB>
PlanesTapsFn pick_planes_taps(std::size_t tb, std::index_sequence<TB...>) {
  PlanesTapsFn fn = nullptr;
  ((fn = tb == TB + 1 ? &planes_taps_block<TB + 1> : fn), ...);
  return fn;
}

}  // namespace

// The output plane is walked as a list of 8-column vectors (a row whose width is not a multiple
// of 8 ends with one that overlaps the vector before it: those columns are computed and stored
// twice, identically). Three vectors x 4 output channels are in registers at a time: per tap 3 x
// loads, 4 broadcast weights and 12 FMAs, 12 independent chains to cover the FMA latency (one
// vector x 8 channels ran at 37% of the roof in cache, bound by its 8 chains and its loads).
// The last group of a plane repeats its last vector when the count is not a multiple of 3. The
// ReLU is max(0, acc), which keeps a NaN (as the reference and PyTorch do).
void f32_conv_forward_planes__avx2(const ConvPlanes& p, const float* x, const float* w, const float* bias,
                                   bool relu, float* y) {
  const std::size_t taps = p.in_channels * p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  if (p.out_w < 8 || taps > kConvPlanesMaxTaps) {
    f32_conv_forward_planes__ref(p, x, w, bias, relu, y);
    return;
  }
  std::size_t offsets[kConvPlanesMaxTaps];
  conv_planes_tap_offsets(p, offsets);
  const __m256 zero = _mm256_setzero_ps();
  for (std::size_t o0 = 0; o0 < p.out_channels; o0 += 4) {
    const float* wb = w + (o0 / 8) * taps * 8 + o0 % 8;  // 4 of an 8-lane packed group
    const std::size_t n_oc = p.out_channels - o0 < 4 ? p.out_channels - o0 : 4;
    PlaneVectorGroups<8, 3> walk(p);
    for (std::size_t group = 0; group < walk.groups(); ++group) {
      std::size_t x_at[3], y_at[3];
      walk.next(x_at, y_at);
      __m256 acc[3][4];
#pragma GCC unroll 16
      for (std::size_t o = 0; o < 4; ++o)
        acc[0][o] = acc[1][o] = acc[2][o] = _mm256_broadcast_ss(bias + o0 + o);
      const float *x0 = x + x_at[0], *x1 = x + x_at[1], *x2 = x + x_at[2];
      for (std::size_t t = 0; t < taps; ++t) {
        const std::size_t off = offsets[t];
        const __m256 a = _mm256_loadu_ps(x0 + off), b = _mm256_loadu_ps(x1 + off),
                     c = _mm256_loadu_ps(x2 + off);
        const float* wt = wb + t * 8;
#pragma GCC unroll 16
        for (std::size_t o = 0; o < 4; ++o) {
          const __m256 wv = _mm256_broadcast_ss(wt + o);
          acc[0][o] = _mm256_fmadd_ps(wv, a, acc[0][o]);
          acc[1][o] = _mm256_fmadd_ps(wv, b, acc[1][o]);
          acc[2][o] = _mm256_fmadd_ps(wv, c, acc[2][o]);
        }
      }
      // Compile-time loops: indexing acc by a run-time bound would keep it in memory.
#pragma GCC unroll 4
      for (std::size_t o = 0; o < 4; ++o) {
        if (o >= n_oc) break;
        float* yo = y + (o0 + o) * plane;
#pragma GCC unroll 3
        for (std::size_t j = 0; j < 3; ++j)
          _mm256_storeu_ps(yo + y_at[j], relu ? _mm256_max_ps(zero, acc[j][o]) : acc[j][o]);
      }
    }
  }
}

// Per output channel: its gradient plane, masked by the fused ReLU and with rows zero-padded to
// whole vectors, is copied into a small buffer (L1); then blocks of up to 12 taps run over it,
// each gradient vector feeding every tap of the block. x's rows are long enough (ConvPlanes) that
// the padded columns read real memory, which they multiply by zero.
void f32_conv_backward_weights_planes__avx2(const ConvPlanes& p, const float* x, const float* dy,
                                            const float* y, float* dw, float* db) {
  const std::size_t taps = p.in_channels * p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  const std::size_t g_ld = (p.out_w + 7) / 8 * 8;
  if (p.out_w < 8 || taps > kConvPlanesMaxTaps || p.out_h * g_ld > kConvPlanesMaxPlane ||
      g_ld + p.kernel_w - 1 > p.x_ld) {
    f32_conv_backward_weights_planes__ref(p, x, dy, y, dw, db);
    return;
  }
  std::size_t offsets[kConvPlanesMaxTaps];
  conv_planes_tap_offsets(p, offsets);
  alignas(32) float g[kConvPlanesMaxPlane];
  const std::size_t blocks = (taps + kPlanesMaxTapBlock - 1) / kPlanesMaxTapBlock;
  const std::size_t full = p.out_w / 8 * 8, tail = p.out_w - full;
  const __m256 zero = _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i tail_shift = _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(8 - tail)));
  const __m256 tail_keep =
      _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(tail)), lane));
  for (std::size_t oc = 0; oc < p.out_channels; ++oc) {
    const float* d = dy + oc * plane;
    const float* yo = y ? y + oc * plane : nullptr;
    // Rows of whole vectors; a row's last partial vector is loaded where it ends (overlapping
    // the vector before), its new columns moved down by a lane permute and the rest zeroed.
    // (A scalar tail loop here was auto-vectorised into masked moves, microcoded on AMD Zen.)
    __m256 sum = zero;
    for (std::size_t r = 0; r < p.out_h; ++r) {
      float* gr = g + r * g_ld;
      const float* dr = d + r * p.out_w;
      for (std::size_t c = 0; c < full; c += 8) {
        __m256 v = _mm256_loadu_ps(dr + c);
        if (yo) v = _mm256_and_ps(v, _mm256_cmp_ps(_mm256_loadu_ps(yo + r * p.out_w + c), zero, _CMP_GT_OQ));
        sum = _mm256_add_ps(sum, v);
        _mm256_store_ps(gr + c, v);
      }
      if (tail > 0) {
        const std::size_t at = r * p.out_w + p.out_w - 8;
        __m256 v = _mm256_loadu_ps(d + at);
        if (yo) v = _mm256_and_ps(v, _mm256_cmp_ps(_mm256_loadu_ps(yo + at), zero, _CMP_GT_OQ));
        v = _mm256_and_ps(_mm256_permutevar8x32_ps(v, tail_shift), tail_keep);
        sum = _mm256_add_ps(sum, v);
        _mm256_store_ps(gr + full, v);
      }
    }
    if (db) db[oc] += Avx2::reduce_add(sum);
    float* dwo = dw + oc * taps;
    for (std::size_t b = 0, t0 = 0; b < blocks; ++b) {
      const std::size_t t1 = taps * (b + 1) / blocks;
      pick_planes_taps(t1 - t0, std::make_index_sequence<kPlanesMaxTapBlock>())(g, p.out_h, g_ld, x, p.x_ld,
                                                                                offsets + t0, dwo + t0);
      t0 = t1;
    }
  }
}

}  // namespace cpudl::kernels
