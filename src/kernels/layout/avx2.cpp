// AVX2 layout kernels (layout.h): 8 x 8 register transposes, scalar edges.
#include <immintrin.h>

#include "kernels/layout/layout.h"

namespace cpudl::kernels {
namespace {

// dst rows 0..7 (stride ld_dst) = columns 0..7 of the 8 x 8 block at src (stride ld_src).
inline void transpose_8x8(const float* src, std::size_t ld_src, float* dst, std::size_t ld_dst) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  // Pairs of rows interleaved; now gather 4-element column pieces.
  r[0] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(1, 0, 1, 0));
  r[1] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(3, 2, 3, 2));
  r[2] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(1, 0, 1, 0));
  r[3] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(3, 2, 3, 2));
  r[4] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(1, 0, 1, 0));
  r[5] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(3, 2, 3, 2));
  r[6] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(1, 0, 1, 0));
  r[7] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(3, 2, 3, 2));
  // Lanes: low halves give columns 0-3, high halves columns 4-7.
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ld_dst, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ld_dst, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

}  // namespace

void f32_transpose__avx2(const float* src, std::size_t rows, std::size_t cols, std::size_t ld_src, float* dst,
                         std::size_t ld_dst) {
  const std::size_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (std::size_t i = 0; i < rows8; i += 8) {
    for (std::size_t j = 0; j < cols8; j += 8)
      transpose_8x8(src + i * ld_src + j, ld_src, dst + j * ld_dst + i, ld_dst);
    for (std::size_t j = cols8; j < cols; ++j)
      for (std::size_t k = i; k < i + 8; ++k) dst[j * ld_dst + k] = src[k * ld_src + j];
  }
  for (std::size_t i = rows8; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
}

}  // namespace cpudl::kernels
