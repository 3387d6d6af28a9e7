// AVX2 dynamic int8 kernels. The product is exact (int8.h explains how each path keeps
// VPMADDUBSW's int16 pair sums from saturating); blocks of 4 rows x 16 columns keep 8 int32
// accumulators in registers, each 32-byte load of B feeding 4 rows, and the activations come
// prepared (prepare_u8s8_rows): three instructions per 32 multiply-adds for 7-bit weights, four
// for 8-bit ones.
#include <immintrin.h>

#include <cstring>

#include "kernels/int8/int8.h"

namespace cpudl::kernels {
namespace {

// One block of R rows x 8 * B columns, all of K. `cols` (<= 8 * B) columns are stored.
template <int R, int B, bool SevenBit>
void block(const U8S8GemmArgs& g, std::size_t m0, std::size_t n0, std::size_t cols) {
  const std::size_t k4 = (g.k + 3) / 4 * 4, groups = k4 / 4;
  const std::int8_t* b = g.b_packed + (n0 / 8) * k4 * 8;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) acc[r][j] = _mm256_setzero_si256();
  // Per block of 8 columns, then per row: a' and |a'| are broadcast again for each block (loads,
  // which are cheap) rather than held, so the 8 accumulators, the weights and the constant fit
  // the 16 registers without spilling.
  for (std::size_t q = 0; q < groups; ++q) {
    for (int j = 0; j < B; ++j) {
      const __m256i w = _mm256_load_si256(
          reinterpret_cast<const __m256i*>(b + static_cast<std::size_t>(j) * k4 * 8 + q * 32));
      for (int r = 0; r < R; ++r) {
        const std::size_t at = (m0 + static_cast<std::size_t>(r)) * g.lda + q * 4;
        __m256i pairs;
        if constexpr (SevenBit) {  // a <= 255 times |b| <= 64: pairs within +-32640
          std::int32_t a4;
          std::memcpy(&a4, g.a + at, 4);
          pairs = _mm256_maddubs_epi16(_mm256_set1_epi32(a4), w);
        } else {  // |a'| <= 128 times sign(a') b, |b| <= 127: pairs within +-32512
          std::int32_t s4, m4;
          std::memcpy(&s4, g.a_shifted + at, 4);
          std::memcpy(&m4, g.a_magnitude + at, 4);
          pairs = _mm256_maddubs_epi16(_mm256_set1_epi32(m4), _mm256_sign_epi8(w, _mm256_set1_epi32(s4)));
        }
        acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  // Epilogue: the zero point's correction, -a_zero per column sum (for the shifted path, whose
  // sum a b = sum (a - 128) b + 128 sum b, 128 - a_zero); then the float steps in the unfused
  // graph's order.
  const __m256i correction = _mm256_set1_epi32(SevenBit ? -g.a_zero : 128 - g.a_zero);
  const __m256 a_scale = _mm256_set1_ps(g.a_scale), zero = _mm256_setzero_ps();
  for (int j = 0; j < B; ++j) {
    const std::size_t n = n0 + static_cast<std::size_t>(j) * 8;
    if (n >= n0 + cols) break;
    const std::size_t width = n0 + cols - n < 8 ? n0 + cols - n : 8;
    alignas(32) std::int32_t sums[8] = {};
    alignas(32) float scale[8] = {}, bias[8] = {};
    std::memcpy(sums, g.b_col_sums + n, width * 4);
    for (std::size_t i = 0; i < width; ++i) scale[i] = g.b_scale[g.b_scale_per_column ? n + i : 0];
    if (g.bias) std::memcpy(bias, g.bias + n, width * 4);
    const __m256i col_sums = _mm256_load_si256(reinterpret_cast<const __m256i*>(sums));
    const __m256 s = _mm256_mul_ps(a_scale, _mm256_load_ps(scale)), bv = _mm256_load_ps(bias);
    for (int r = 0; r < R; ++r) {
      const __m256i total = _mm256_add_epi32(acc[r][j], _mm256_mullo_epi32(correction, col_sums));
      __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(total), s);
      if (g.bias) y = _mm256_add_ps(y, bv);
      if (g.relu) y = _mm256_max_ps(y, zero);
      float* c = g.c + (m0 + static_cast<std::size_t>(r)) * g.ldc + n;
      if (width == 8) {
        _mm256_storeu_ps(c, y);
      } else {
        alignas(32) float out[8];
        _mm256_store_ps(out, y);
        std::memcpy(c, out, width * 4);
      }
    }
  }
}

template <int B, bool SevenBit>
void rows(const U8S8GemmArgs& g, std::size_t n0, std::size_t cols) {
  std::size_t m = 0;
  for (; m + 4 <= g.m; m += 4) block<4, B, SevenBit>(g, m, n0, cols);
  switch (g.m - m) {
    case 3:
      block<3, B, SevenBit>(g, m, n0, cols);
      break;
    case 2:
      block<2, B, SevenBit>(g, m, n0, cols);
      break;
    case 1:
      block<1, B, SevenBit>(g, m, n0, cols);
      break;
    default:
      break;
  }
}

template <bool SevenBit>
void columns(const U8S8GemmArgs& g) {
  for (std::size_t n = g.n_begin; n < g.n_end; n += 16) {
    const std::size_t cols = g.n_end - n < 16 ? g.n_end - n : 16;
    if (cols > 8)
      rows<2, SevenBit>(g, n, cols);
    else
      rows<1, SevenBit>(g, n, cols);
  }
}

}  // namespace

void u8s8_gemm__avx2(const U8S8GemmArgs& g) {
  if (g.b_seven_bit)
    columns<true>(g);
  else
    columns<false>(g);
}

void f32_min_max__avx2(const float* x, std::size_t n, float* lo, float* hi) {
  __m256 vlo = _mm256_set1_ps(x[0]), vhi = vlo;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vlo = _mm256_min_ps(vlo, v);
    vhi = _mm256_max_ps(vhi, v);
  }
  alignas(32) float l[8], h[8];
  _mm256_store_ps(l, vlo);
  _mm256_store_ps(h, vhi);
  float a = l[0], b = h[0];
  for (int j = 1; j < 8; ++j) {
    a = l[j] < a ? l[j] : a;
    b = h[j] > b ? h[j] : b;
  }
  for (; i < n; ++i) {
    a = x[i] < a ? x[i] : a;
    b = x[i] > b ? x[i] : b;
  }
  *lo = a;
  *hi = b;
}

void f32_quantize_u8__avx2(const float* x, std::size_t n, float scale, std::int32_t zero, std::uint8_t* y) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(static_cast<float>(zero));
  const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // Clamped in float, before the conversion, as the reference does (MAX returns its second
  // operand for a NaN, so NaN becomes 0 in both).
  auto quantize8 = [&](const float* p) {
    __m256 v = _mm256_add_ps(
        _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(p), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        z);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    return _mm256_cvtps_epi32(v);
  };
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i p01 = _mm256_packs_epi32(quantize8(x + i), quantize8(x + i + 8));
    const __m256i p23 = _mm256_packs_epi32(quantize8(x + i + 16), quantize8(x + i + 24));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), bytes);
  }
  for (; i < n; ++i) {
    float v = static_cast<float>(__builtin_nearbyintf(x[i] / scale)) + static_cast<float>(zero);
    v = v >= 0.0f ? v : 0.0f;
    y[i] = static_cast<std::uint8_t>(v < 255.0f ? v : 255.0f);
  }
}

}  // namespace cpudl::kernels
