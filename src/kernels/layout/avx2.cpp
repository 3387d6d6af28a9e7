// AVX2 layout kernels (layout.h): 8 x 8 register transposes, scalar edges.
#include <immintrin.h>

#include "kernels/layout/layout.h"
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {

// dst rows 0..7 (stride ld_dst) = columns 0..7 of the 8 x 8 block at src (stride ld_src).
inline void transpose_8x8(const float* src, std::size_t ld_src, float* dst, std::size_t ld_dst) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
  Avx2::transpose(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ld_dst, r[i]);
}

// r[0..7] = the 8 columns at src of `rows` (< 8) source rows, zero rows below.
inline void load_rows_block(const float* src, std::size_t ld_src, std::size_t rows, __m256* r) {
  for (std::size_t i = 0; i < 8; ++i)
    r[i] = i < rows ? _mm256_loadu_ps(src + i * ld_src) : _mm256_setzero_ps();
}

// Fewer than 8 source rows, packed destination rows (ld_dst == rows): to channels-last for C < 8.
void transpose_few_rows(const float* src, std::size_t rows, std::size_t cols, std::size_t ld_src,
                        float* dst) {
  // A store at destination row q writes q * rows + 8 floats: within the buffer while that is
  // at most cols * rows; the last rows go one value at a time.
  const std::size_t safe_cols = cols * rows >= 8 ? (cols * rows - 8) / rows + 1 : 0;
  std::size_t j = 0;
  for (; j + 8 <= safe_cols; j += 8) {
    __m256 r[8];
    load_rows_block(src + j, ld_src, rows, r);
    Avx2::transpose(r);
    for (std::size_t q = 0; q < 8; ++q) _mm256_storeu_ps(dst + (j + q) * rows, r[q]);
  }
  for (; j < cols; ++j)
    for (std::size_t i = 0; i < rows; ++i) dst[j * rows + i] = src[i * ld_src + j];
}

// Fewer than 8 source columns in packed source rows (ld_src == cols): from channels-last for
// C < 8. Blocks of 8 source rows load 8 lanes each (running into the next row, which is in the
// buffer but for the last rows: those go one value at a time).
void transpose_few_cols(const float* src, std::size_t rows, std::size_t cols, float* dst,
                        std::size_t ld_dst) {
  const std::size_t safe_rows = rows * cols >= 8 ? (rows * cols - 8) / cols + 1 : 0;
  std::size_t i = 0;
  for (; i + 8 <= safe_rows; i += 8) {
    __m256 r[8];
    for (std::size_t k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + (i + k) * cols);
    Avx2::transpose(r);
    for (std::size_t q = 0; q < cols; ++q) _mm256_storeu_ps(dst + q * ld_dst + i, r[q]);
  }
  for (; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * cols + j];
}

}  // namespace

void f32_transpose__avx2(const float* src, std::size_t rows, std::size_t cols, std::size_t ld_src, float* dst,
                         std::size_t ld_dst) {
  if (rows < 8 && ld_dst == rows) return transpose_few_rows(src, rows, cols, ld_src, dst);
  if (cols < 8 && ld_src == cols) return transpose_few_cols(src, rows, cols, dst, ld_dst);
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
