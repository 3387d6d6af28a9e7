// AVX512-VNNI dynamic int8 product. VPDPBUSD multiplies u8 by s8 and adds each group of four
// products straight into an int32 lane, with no int16 step to saturate: the raw activations meet
// the weights as packed, whatever their range (the shifted and 7-bit forms the AVX2 kernel needs
// are not read), one instruction per 64 multiply-adds.
//
// A 512-bit vector holds 16 columns at one group of 4 k: the 32-byte groups of two adjacent
// packed column blocks (int8.h's layout), so each row's 4 activation bytes are one broadcast.
// Blocks of 8 rows x 32 columns: 16 accumulators, each weight vector (two loads and an insert)
// feeding 8 rows. BM_u8s8_gemm at 64 x 1024 x 1024, one thread: 54-57% of the int8 roof with
// 4 rows x 64 columns, 64-67% with 8 x 32 and the broadcasts taken from memory.
#include <immintrin.h>

#include "kernels/int8/int8.h"

namespace cpudl::kernels {
namespace {

constexpr std::size_t kTileColumns = 32;

// Group q (4 k values) of the 16 columns from packed block `j` on; `pair` is false when block
// j + 1 does not exist (the last 8 or fewer columns), and that half stays zero.
__m512i weights16(const std::int8_t* b, std::size_t k4, std::size_t j, std::size_t q, bool pair) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + j * k4 * 8 + q * 32));
  if (!pair) return _mm512_castsi256_si512(lo);
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (j + 1) * k4 * 8 + q * 32));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// R rows x B vectors of 16 columns from column n0 (a multiple of 8); `cols` <= 16 * B are stored.
template <int R, int B>
void block(const U8S8GemmArgs& g, std::size_t m0, std::size_t n0, std::size_t cols) {
  const std::size_t k4 = (g.k + 3) / 4 * 4, groups = k4 / 4, j0 = n0 / 8;
  const std::size_t blocks = (cols + 7) / 8;  // packed column blocks in this tile
  __m512i acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < B; ++v) acc[r][v] = _mm512_setzero_si512();
  for (std::size_t q = 0; q < groups; ++q) {
    __m512i w[B];
    for (int v = 0; v < B; ++v) {
      const std::size_t j = 2 * static_cast<std::size_t>(v);
      w[v] = j < blocks ? weights16(g.b_packed, k4, j0 + j, q, j + 1 < blocks) : _mm512_setzero_si512();
    }
    for (int r = 0; r < R; ++r) {
      // Broadcast from memory (a load-port operation; from a register it would take the port
      // the products need).
      const __m512i a =
          _mm512_broadcastd_epi32(_mm_loadu_si32(g.a + (m0 + static_cast<std::size_t>(r)) * g.lda + q * 4));
      for (int v = 0; v < B; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, w[v]);
    }
  }
  // Epilogue: sum (a - a_zero) b = sum a b - a_zero sum b, then the float steps in the unfused
  // graph's order (scale, bias, ReLU).
  const __m512i correction = _mm512_set1_epi32(-g.a_zero);
  const __m512 a_scale = _mm512_set1_ps(g.a_scale), zero = _mm512_setzero_ps();
  for (int v = 0; v < B; ++v) {
    const std::size_t n = n0 + 16 * static_cast<std::size_t>(v);
    if (n >= n0 + cols) break;
    const std::size_t width = n0 + cols - n < 16 ? n0 + cols - n : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1);
    const __m512i col_sums = _mm512_maskz_loadu_epi32(mask, g.b_col_sums + n);
    const __m512 scale =
        g.b_scale_per_column ? _mm512_maskz_loadu_ps(mask, g.b_scale + n) : _mm512_set1_ps(g.b_scale[0]);
    const __m512 s = _mm512_mul_ps(a_scale, scale);
    const __m512 bias = g.bias ? _mm512_maskz_loadu_ps(mask, g.bias + n) : zero;
    for (int r = 0; r < R; ++r) {
      const __m512i total = _mm512_add_epi32(acc[r][v], _mm512_mullo_epi32(correction, col_sums));
      __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(total), s);
      if (g.bias) y = _mm512_add_ps(y, bias);
      if (g.relu) y = _mm512_max_ps(y, zero);
      _mm512_mask_storeu_ps(g.c + (m0 + static_cast<std::size_t>(r)) * g.ldc + n, mask, y);
    }
  }
}

template <int B>
void rows(const U8S8GemmArgs& g, std::size_t n0, std::size_t cols) {
  constexpr int R = B <= 2 ? 8 : 4;  // at most 16 accumulators
  std::size_t m = 0;
  for (; m + R <= g.m; m += R) block<R, B>(g, m, n0, cols);
  if (R == 8 && m + 4 <= g.m) block<4, B>(g, m, n0, cols), m += 4;
  switch (g.m - m) {
    case 3:
      block<3, B>(g, m, n0, cols);
      break;
    case 2:
      block<2, B>(g, m, n0, cols);
      break;
    case 1:
      block<1, B>(g, m, n0, cols);
      break;
    default:
      break;
  }
}

}  // namespace

void u8s8_gemm__avx512_vnni(const U8S8GemmArgs& g) {
  for (std::size_t n = g.n_begin; n < g.n_end; n += kTileColumns) {
    const std::size_t cols = g.n_end - n < kTileColumns ? g.n_end - n : kTileColumns;
    if (cols > 16)
      rows<2>(g, n, cols);
    else
      rows<1>(g, n, cols);
  }
}

}  // namespace cpudl::kernels
