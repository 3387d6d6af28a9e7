// AVX-512 planar first-layer convolution (conv.h): the AVX2 kernels' schemes with 16-column
// vectors and the 32 registers. Forward: 3 vectors x 8 output channels in registers (24 chains;
// per tap 3 x loads, 8 broadcast weights, 24 FMAs). Weight gradient: three output channels at a
// time, in blocks of up to 9 taps (27 accumulators), each x vector feeding the three channels
// and each gradient vector the block's taps; a row's partial last vector is a k-masked load. Planes narrower
// than 16 columns run the AVX2 kernels.
//
// The tap-major weight gradient's block (f32_conv_weight_grad_taps): up to 6 input channels x 64
// output channels in 24 accumulators; per pixel 4 gradient loads, up to 6 broadcasts of x and 24
// FMAs. Six rows measured best here on one core with both operands in L1 (91% of the FMA roof;
// 4 rows 83%, 2 rows 73%; 7 rows need 33 registers).
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "kernels/conv/conv.h"

namespace cpudl::kernels {
namespace {

// v, loaded once into a register: GCC otherwise folds a load used by several FMAs into each of
// them as a memory operand, loading the same (line-splitting, unaligned) vector once per FMA.
inline __m512 in_register(__m512 v) {
  asm("" : "+v"(v));
  return v;
}

// acc[o][t] += sum over the (zero-padded) gradient rows of g_o * x shifted by tap t's offset,
// for OCB output channels (gradient planes g_plane apart) and the TB taps of one block: each x
// vector is loaded once for the OCB channels, each gradient vector once for the TB taps.
template <std::size_t OCB, std::size_t TB>
void taps_block(const float* g, std::size_t g_plane, std::size_t rows, std::size_t g_ld, const float* x,
                std::size_t x_ld, const std::size_t* offsets, float* dw, std::size_t dw_ld) {
  __m512 acc[OCB][TB];
#pragma GCC unroll 4
  for (std::size_t o = 0; o < OCB; ++o)
#pragma GCC unroll 32
    for (std::size_t t = 0; t < TB; ++t) acc[o][t] = _mm512_setzero_ps();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* gr = g + r * g_ld;
    const float* xr = x + r * x_ld;
    for (std::size_t c = 0; c < g_ld; c += 16) {
      __m512 gv[OCB];
#pragma GCC unroll 4
      for (std::size_t o = 0; o < OCB; ++o) gv[o] = _mm512_load_ps(gr + o * g_plane + c);
#pragma GCC unroll 32
      for (std::size_t t = 0; t < TB; ++t) {
        const __m512 xv = in_register(_mm512_loadu_ps(xr + offsets[t] + c));
#pragma GCC unroll 4
        for (std::size_t o = 0; o < OCB; ++o) acc[o][t] = _mm512_fmadd_ps(gv[o], xv, acc[o][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (std::size_t o = 0; o < OCB; ++o)
#pragma GCC unroll 32
    for (std::size_t t = 0; t < TB; ++t) dw[o * dw_ld + t] += _mm512_reduce_add_ps(acc[o][t]);
}

// Channels per group: three, whose 9-tap blocks (27 accumulators, 3 gradient vectors and an x
// vector) fill the 32 registers: 12 loads per 27 FMAs where one channel at a time took 10 per 9.
constexpr std::size_t kChannelGroup = 3;
// Taps per block for a group of OCB channels: OCB x TB accumulators + OCB + 1 vectors in 32.
constexpr std::size_t max_tap_block(std::size_t ocb) { return ocb == 1 ? 28 : ocb == 2 ? 14 : 9; }
using TapsFn = void (*)(const float*, std::size_t, std::size_t, std::size_t, const float*, std::size_t,
                        const std::size_t*, float*, std::size_t);
template <std::size_t OCB, std::size_t... TB>
TapsFn pick_taps(std::size_t tb, std::index_sequence<TB...>) {
  TapsFn fn = nullptr;
  ((fn = tb == TB + 1 ? &taps_block<OCB, TB + 1> : fn), ...);
  return fn;
}
TapsFn pick_taps(std::size_t ocb, std::size_t tb) {
  if (ocb == 1) return pick_taps<1>(tb, std::make_index_sequence<max_tap_block(1)>());
  if (ocb == 2) return pick_taps<2>(tb, std::make_index_sequence<max_tap_block(2)>());
  return pick_taps<3>(tb, std::make_index_sequence<max_tap_block(3)>());
}

}  // namespace

// The output plane is walked as a list of 16-column vectors (a row whose width is not a multiple
// of 16 ends with one overlapping the vector before it, whose shared columns are computed and
// stored twice, identically); the last group of a plane repeats its last vector when the count
// is not a multiple of 3. The ReLU is max(0, acc), which keeps a NaN; without it, max(-inf, acc).
void f32_conv_forward_planes__avx512(const ConvPlanes& p, const float* x, const float* w, const float* bias,
                                     bool relu, float* y) {
  const std::size_t taps = p.in_channels * p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  if (p.out_w < 16 || taps > kConvPlanesMaxTaps) {
    f32_conv_forward_planes__avx2(p, x, w, bias, relu, y);
    return;
  }
  std::size_t offsets[kConvPlanesMaxTaps];
  conv_planes_tap_offsets(p, offsets);
  const __m512 zero = _mm512_setzero_ps();
  for (std::size_t o0 = 0; o0 < p.out_channels; o0 += 8) {
    const float* wb = w + (o0 / 8) * taps * 8;  // one packed 8-lane group
    const std::size_t n_oc = p.out_channels - o0 < 8 ? p.out_channels - o0 : 8;
    PlaneVectorGroups<16, 3> walk(p);
    for (std::size_t group = 0; group < walk.groups(); ++group) {
      std::size_t x_at[3], y_at[3];
      walk.next(x_at, y_at);
      __m512 acc[3][8];
#pragma GCC unroll 8
      for (std::size_t o = 0; o < 8; ++o) acc[0][o] = acc[1][o] = acc[2][o] = _mm512_set1_ps(bias[o0 + o]);
      const float *x0 = x + x_at[0], *x1 = x + x_at[1], *x2 = x + x_at[2];
      for (std::size_t t = 0; t < taps; ++t) {
        const std::size_t off = offsets[t];
        const __m512 a = _mm512_loadu_ps(x0 + off), b = _mm512_loadu_ps(x1 + off),
                     c = _mm512_loadu_ps(x2 + off);
        const float* wt = wb + t * 8;
#pragma GCC unroll 8
        for (std::size_t o = 0; o < 8; ++o) {
          const __m512 wv = _mm512_set1_ps(wt[o]);
          acc[0][o] = _mm512_fmadd_ps(wv, a, acc[0][o]);
          acc[1][o] = _mm512_fmadd_ps(wv, b, acc[1][o]);
          acc[2][o] = _mm512_fmadd_ps(wv, c, acc[2][o]);
        }
      }
      // Compile-time loops: indexing acc by a run-time bound would keep it in memory.
      const __m512 floor = relu ? zero : _mm512_set1_ps(-__builtin_inff());  // max(-inf, v) = v, NaN kept
      float* y0 = y + o0 * plane;
      // A full block of 8 channels stores without a branch per channel (11% of the kernel's time
      // in cache); a partial one stops at the last channel.
      if (n_oc == 8) {
#pragma GCC unroll 8
        for (std::size_t o = 0; o < 8; ++o)
#pragma GCC unroll 3
          for (std::size_t j = 0; j < 3; ++j)
            _mm512_storeu_ps(y0 + o * plane + y_at[j], _mm512_max_ps(floor, acc[j][o]));
      } else {
#pragma GCC unroll 8
        for (std::size_t o = 0; o < 8; ++o) {
          if (o >= n_oc) break;
#pragma GCC unroll 3
          for (std::size_t j = 0; j < 3; ++j)
            _mm512_storeu_ps(y0 + o * plane + y_at[j], _mm512_max_ps(floor, acc[j][o]));
        }
      }
    }
  }
}

// Per output channel: its gradient plane, masked by the fused ReLU and with rows zero-padded to
// whole vectors, is copied into a small buffer (L1); then blocks of taps run over three channels'
// buffers at once.
// x's rows are long enough (conv_planes_row) that the padded columns read real memory, which
// they multiply by zero.
void f32_conv_backward_weights_planes__avx512(const ConvPlanes& p, const float* x, const float* dy,
                                              const float* y, float* dw, float* db) {
  const std::size_t taps = p.in_channels * p.kernel_h * p.kernel_w, plane = p.out_h * p.out_w;
  const std::size_t g_ld = (p.out_w + 15) / 16 * 16;
  if (p.out_w < 16 || taps > kConvPlanesMaxTaps || p.out_h * g_ld > kConvPlanesMaxPlane ||
      g_ld + p.kernel_w - 1 > p.x_ld) {
    f32_conv_backward_weights_planes__avx2(p, x, dy, y, dw, db);
    return;
  }
  std::size_t offsets[kConvPlanesMaxTaps];
  conv_planes_tap_offsets(p, offsets);
  alignas(64) float g[kChannelGroup * kConvPlanesMaxPlane];
  const std::size_t g_plane = p.out_h * g_ld;
  const std::size_t full = p.out_w / 16 * 16, tail = p.out_w - full;
  const __mmask16 tail_lanes = static_cast<__mmask16>((1u << tail) - 1u);
  const __m512 zero = _mm512_setzero_ps();
  for (std::size_t oc0 = 0; oc0 < p.out_channels; oc0 += kChannelGroup) {
    const std::size_t ocb = std::min(kChannelGroup, p.out_channels - oc0);
    for (std::size_t o = 0; o < ocb; ++o) {
      const std::size_t oc = oc0 + o;
      const float* d = dy + oc * plane;
      const float* yo = y ? y + oc * plane : nullptr;
      __m512 sum = zero;
      for (std::size_t r = 0; r < p.out_h; ++r) {
        float* gr = g + o * g_plane + r * g_ld;
        const float* dr = d + r * p.out_w;
        for (std::size_t c = 0; c <= full; c += 16) {
          const __mmask16 lanes = c < full ? static_cast<__mmask16>(0xffff) : tail_lanes;
          if (c == full && tail == 0) break;
          __mmask16 pass = lanes;
          if (yo)
            pass = _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, yo + r * p.out_w + c), zero,
                                           _CMP_GT_OQ);
          const __m512 v = _mm512_maskz_loadu_ps(pass, dr + c);
          sum = _mm512_add_ps(sum, v);
          _mm512_store_ps(gr + c, v);
        }
      }
      if (db) db[oc] += _mm512_reduce_add_ps(sum);
    }
    const std::size_t blocks = (taps + max_tap_block(ocb) - 1) / max_tap_block(ocb);
    for (std::size_t b = 0, t0 = 0; b < blocks; ++b) {
      const std::size_t t1 = taps * (b + 1) / blocks;
      pick_taps(ocb, t1 - t0)(g, g_plane, p.out_h, g_ld, x, p.x_ld, offsets + t0, dw + oc0 * taps + t0, taps);
      t0 = t1;
    }
  }
}

namespace {

template <int Rows>
void weight_grad_taps(const TapGemmArgs& a) {
  __m512 acc[Rows][4];
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_loadu_ps(a.c + i * kTapGemmColumns + 16 * j);
  for (std::int64_t r = 0; r < a.row_count; ++r) {
    const float* x = a.x + r * a.x_row;
    const float* dy = a.dy + r * a.dy_row;
    for (std::int64_t p = 0; p < a.pixels; ++p) {
      const __m512 g0 = _mm512_loadu_ps(dy), g1 = _mm512_loadu_ps(dy + 16);
      const __m512 g2 = _mm512_loadu_ps(dy + 32), g3 = _mm512_loadu_ps(dy + 48);
#pragma GCC unroll 6
      for (int i = 0; i < Rows; ++i) {
        const __m512 xi = _mm512_set1_ps(x[i]);
        acc[i][0] = _mm512_fmadd_ps(xi, g0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(xi, g1, acc[i][1]);
        acc[i][2] = _mm512_fmadd_ps(xi, g2, acc[i][2]);
        acc[i][3] = _mm512_fmadd_ps(xi, g3, acc[i][3]);
      }
      x += a.x_step;
      dy += a.dy_step;
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(a.c + i * kTapGemmColumns + 16 * j, acc[i][j]);
}

}  // namespace

void f32_conv_weight_grad_taps__avx512(const TapGemmArgs& a) {
  switch (a.rows) {
    case 6:
      return weight_grad_taps<6>(a);
    case 5:
      return weight_grad_taps<5>(a);
    case 4:
      return weight_grad_taps<4>(a);
    case 3:
      return weight_grad_taps<3>(a);
    case 2:
      return weight_grad_taps<2>(a);
    case 1:
      return weight_grad_taps<1>(a);
    default:  // the driver passes 1 to kTapGemmMaxRows
      return;
  }
}

}  // namespace cpudl::kernels
