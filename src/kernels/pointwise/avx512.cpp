// AVX-512 pointwise tile: 6 pixels x 4 vectors in 24 zmm accumulators; per k step four panel
// loads (L1) and six broadcasts, as the tap-major weight gradient's block (conv/avx512.cpp).
#include <immintrin.h>

#include <algorithm>

#include "kernels/pointwise/pointwise.h"

namespace cpudl::kernels {

namespace {

inline void put(float* c, __m512 v, bool stream) {
  if (stream)
    _mm512_stream_ps(c, v);
  else
    _mm512_storeu_ps(c, v);
}

template <int Rows>
void tile(const PointwiseTileArgs& t) {
  const float* a[Rows];
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i) a[i] = t.a[i];
  __m512 acc[Rows][4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 init = t.bias ? _mm512_loadu_ps(t.bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) acc[i][j] = init;
  }
  // Side work every 16 steps (one line of each fetched row): this many zero lines each time.
  const std::int64_t zero_lines = t.zero_floats / 16, slots = std::max<std::int64_t>(1, (t.k + 15) / 16);
  const std::int64_t zeros_per_slot = (zero_lines + slots - 1) / slots;
  std::int64_t zeroed = 0;
  const __m512 zero = _mm512_setzero_ps();
  const float* b = t.b;
  for (std::int64_t p = 0; p < t.k; ++p, b += kPointwiseColumns) {
    if ((p & 15) == 0) {
      for (int r = 0; r < t.prefetch_rows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(t.prefetch[r] + p), _MM_HINT_T0);
      for (const std::int64_t to = std::min(zero_lines, zeroed + zeros_per_slot); zeroed < to; ++zeroed)
        put(t.zero + zeroed * 16, zero, t.stream);
    }
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    const __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i][p]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(ai, b2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(ai, b3, acc[i][3]);
    }
  }
  for (; zeroed < zero_lines; ++zeroed) put(t.zero + zeroed * 16, zero, t.stream);
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i) {
    float* c = t.c[i];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) put(c + 16 * j, acc[i][j], t.stream);
    for (int d = 1; t.gaps && d <= t.gaps[i]; ++d)
      for (int j = 0; j < 4; ++j) put(c + d * t.gap_stride + 16 * j, zero, t.stream);
  }
}

}  // namespace

void f32_pointwise_tile__avx512(const PointwiseTileArgs& t) {
  for_row_count(t.rows, [&](auto rows) { tile<decltype(rows)::value>(t); });  // 0: the zero region only
  // What the tile left: the whole region when there was no tile, and a tail of fewer than 16.
  const __m512 zero = _mm512_setzero_ps();
  std::int64_t i = t.rows > 0 ? t.zero_floats / 16 * 16 : 0;
  for (; i + 16 <= t.zero_floats; i += 16) put(t.zero + i, zero, t.stream);
  if (i < t.zero_floats)
    _mm512_mask_storeu_ps(t.zero + i, static_cast<__mmask16>((1u << (t.zero_floats - i)) - 1), zero);
}

}  // namespace cpudl::kernels
