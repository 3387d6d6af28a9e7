// AVX2 pointwise tile: the 64 columns in four passes of 16 (6 pixels x 2 ymm, 12 accumulators,
// as the 6x16 GEMM tile), each pass broadcasting the pixels' channels again from L1.
#include <immintrin.h>

#include "kernels/pointwise/pointwise.h"

namespace cpudl::kernels {

namespace {

inline void put(float* c, __m256 v, bool stream) {
  if (stream)
    _mm256_stream_ps(c, v);
  else
    _mm256_storeu_ps(c, v);
}

template <int Rows>
void tile(const PointwiseTileArgs& t) {
  const float* a[Rows];
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i) a[i] = t.a[i];
  for (int q = 0; q < kPointwiseColumns; q += 16) {
    const __m256 init0 = t.bias ? _mm256_loadu_ps(t.bias + q) : _mm256_setzero_ps();
    const __m256 init1 = t.bias ? _mm256_loadu_ps(t.bias + q + 8) : _mm256_setzero_ps();
    __m256 acc[Rows][2];
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) acc[i][0] = init0, acc[i][1] = init1;
    const float* b = t.b + q;
    for (std::int64_t p = 0; p < t.k; ++p, b += kPointwiseColumns) {
      const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
      for (int i = 0; i < Rows; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a[i] + p);
        acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) {
      put(t.c[i] + q, acc[i][0], t.stream);
      put(t.c[i] + q + 8, acc[i][1], t.stream);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i)
    for (int d = 1; t.gaps && d <= t.gaps[i]; ++d)
      for (int j = 0; j < kPointwiseColumns; j += 8) put(t.c[i] + d * t.gap_stride + j, zero, t.stream);
}

}  // namespace

void f32_pointwise_tile__avx2(const PointwiseTileArgs& t) {
  for_row_count(t.rows, [&](auto rows) { tile<decltype(rows)::value>(t); });  // 0: the zero region only
  const __m256 zero = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= t.zero_floats; i += 8) put(t.zero + i, zero, t.stream);
  for (; i < t.zero_floats; ++i) t.zero[i] = 0.0f;
}

}  // namespace cpudl::kernels
