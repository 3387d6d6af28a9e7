// AVX-512 Winograd products (winograd.h): the per-position GEMMs of the forward pass and of the
// weight gradient, where the arithmetic is. 32 zmm registers hold a 12 x 32 tile (24
// accumulators, two 16-channel weight panels, one broadcast), against AVX2's 6 x 16: each
// broadcast feeds twice the FMAs and each FMA four times the lanes. The transforms stay on AVX2:
// they move memory, eight channels at a time in the grouped layout of kernel_types.h.
#include <immintrin.h>

#include <cstddef>
#include <utility>

#include "kernels/winograd/winograd.h"

namespace cpudl::kernels {
namespace {

constexpr int kRows =
    12;  // register tile rows (tiles in the forward product, channels in the weight gradient)

// Rows r < R of m = v times P (1 or 2) 16-column weight panels (C x 16 each, `panel_stride`
// apart), in the grouped form: v points at row 0 of channel group 0 (group g at g *
// group_stride, rows 8 floats apart), m at row 0 of output group k / 8 (each 16-channel panel
// fills two groups). `next` (may be null): the panel to prefetch meanwhile, one line per channel.
template <int R, int P>
void gemm_rows(const float* v, std::size_t channels, std::size_t group_stride, const float* panel,
               std::size_t panel_stride, float* m, const float* next) {
  __m512 acc[P][R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) acc[q][r] = _mm512_setzero_ps();
  for (std::size_t g = 0; g < channels; g += 8) {
    const float* vg = v + g / 8 * group_stride;
#pragma GCC unroll 8
    for (std::size_t cc = 0; cc < 8; ++cc) {
      const std::size_t c = g + cc;
      if (next) _mm_prefetch(reinterpret_cast<const char*>(next + c * kWinogradGemmColumns), _MM_HINT_T0);
      __m512 b[P];
      for (int q = 0; q < P; ++q) b[q] = _mm512_loadu_ps(panel + q * panel_stride + c * kWinogradGemmColumns);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(vg[r * 8 + cc]);
        for (int q = 0; q < P; ++q) acc[q][r] = _mm512_fmadd_ps(a, b[q], acc[q][r]);
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) {
      float* out = m + 2 * q * group_stride + r * 8;
      _mm256_storeu_ps(out, _mm512_castps512_ps256(acc[q][r]));
      _mm256_storeu_ps(out + group_stride, _mm512_extractf32x8_ps(acc[q][r], 1));
    }
}

// Rows r < R of du (input channels; row r's tile stream at v_rows_at[r], tile i at + 8 i) times P
// 16-channel panels of m (panel q's two groups at m_groups[2q] and m_groups[2q + 1]), reduced
// over the tiles into du's panel rows (panel q row r at out + q * panel_stride + 16 r).
template <int R, int P>
void gemm_weights_rows(const float* const* v_rows_at, const float* const* m_groups, std::size_t tiles,
                       float* out, std::size_t panel_stride, bool accumulate) {
  __m512 acc[P][R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) acc[q][r] = _mm512_setzero_ps();
  for (std::size_t i = 0; i < tiles; ++i) {
    __m512 b[P];
    for (int q = 0; q < P; ++q)
      b[q] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(m_groups[2 * q] + i * 8)),
                                _mm256_loadu_ps(m_groups[2 * q + 1] + i * 8), 1);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(v_rows_at[r][i * 8]);
      for (int q = 0; q < P; ++q) acc[q][r] = _mm512_fmadd_ps(a, b[q], acc[q][r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) {
      float* row = out + q * panel_stride + r * kWinogradGemmColumns;
      _mm512_storeu_ps(row, accumulate ? _mm512_add_ps(acc[q][r], _mm512_loadu_ps(row)) : acc[q][r]);
    }
}

// Register tiles by row count (1-12) and panel count (1, 2): [P - 1][R].
template <template <int, int> class Kernel, class Fn, int... R>
constexpr auto row_table(std::integer_sequence<int, R...>) {
  struct Table {
    Fn fn[2][kRows + 1];
  } t{};
  ((t.fn[0][R + 1] = Kernel<R + 1, 1>::fn, t.fn[1][R + 1] = Kernel<R + 1, 2>::fn), ...);
  return t;
}
template <int R, int P>
struct ForwardRows {
  static constexpr auto fn = gemm_rows<R, P>;
};
template <int R, int P>
struct WeightRows {
  static constexpr auto fn = gemm_weights_rows<R, P>;
};
using ForwardFn = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t, float*,
                           const float*);
using WeightFn = void (*)(const float* const*, const float* const*, std::size_t, float*, std::size_t, bool);
constexpr auto kForward = row_table<ForwardRows, ForwardFn>(std::make_integer_sequence<int, kRows>{});
constexpr auto kWeight = row_table<WeightRows, WeightFn>(std::make_integer_sequence<int, kRows>{});

}  // namespace

void f32_winograd_gemm__avx512(std::size_t positions, const float* v, const float* u, float* m,
                               std::size_t tiles, std::size_t v_rows, std::size_t channels,
                               std::size_t out_channels, std::size_t k_begin, std::size_t k_end) {
  const std::size_t group_stride = v_rows * 8, panel_stride = kWinogradGemmColumns * channels;
  for (std::size_t p = 0; p < positions; ++p) {
    const float* vp = v + p * (v_rows * channels + kWinogradPositionPad);
    const float* up = u + p * channels * out_channels;
    float* mp = m + p * (v_rows * out_channels + kWinogradPositionPad);
    for (std::size_t k = k_begin; k < k_end;) {
      const std::size_t panels = k + 2 * kWinogradGemmColumns <= k_end ? 2 : 1;
      const float* panel = up + k * channels;
      const std::size_t k_next = k + panels * kWinogradGemmColumns;
      // The weights stream from L3 or memory: the first row block prefetches the next panel.
      const float* next = k_next < k_end      ? up + k_next * channels
                          : p + 1 < positions ? u + (p + 1) * channels * out_channels + k_begin * channels
                                              : nullptr;
      for (std::size_t i = 0; i < tiles; i += kRows, next = nullptr) {
        const std::size_t rows = tiles - i < kRows ? tiles - i : kRows;
        kForward.fn[panels - 1][rows](vp + i * 8, channels, group_stride, panel, panel_stride,
                                      mp + k * v_rows + i * 8, next);
      }
      k = k_next;
    }
  }
}

void f32_winograd_gemm_weights__avx512(const float* v, const float* m, float* du, std::size_t tiles,
                                       std::size_t v_rows, std::size_t channels, std::size_t out_channels,
                                       std::size_t k_begin, std::size_t k_end, bool accumulate) {
  const std::size_t group_stride = v_rows * 8, panel_stride = kWinogradGemmColumns * channels;
  for (std::size_t p = 0; p < kWinogradPositions; ++p) {
    const float* vp = v + p * (v_rows * channels + kWinogradPositionPad);
    const float* mp = m + p * (v_rows * out_channels + kWinogradPositionPad);
    float* dup = du + p * channels * out_channels;
    for (std::size_t c = 0; c < channels; c += kRows) {
      const std::size_t rows = channels - c < kRows ? channels - c : kRows;
      const float* v_rows_at[kRows];
      for (std::size_t r = 0; r < rows; ++r) v_rows_at[r] = vp + (c + r) / 8 * group_stride + (c + r) % 8;
      for (std::size_t k = k_begin; k < k_end;) {
        const std::size_t panels = k + 2 * kWinogradGemmColumns <= k_end ? 2 : 1;
        const float* m_groups[4];
        for (std::size_t q = 0; q < 2 * panels; ++q) m_groups[q] = mp + (k / 8 + q) * group_stride;
        kWeight.fn[panels - 1][rows](v_rows_at, m_groups, tiles,
                                     dup + k * channels + c * kWinogradGemmColumns, panel_stride, accumulate);
        k += panels * kWinogradGemmColumns;
      }
    }
  }
}

}  // namespace cpudl::kernels
