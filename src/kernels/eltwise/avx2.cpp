// AVX2 variants of the f32 elementwise kernels: 4 x 8 lanes per iteration, masked tails.
#include <immintrin.h>

#include "kernels/eltwise/eltwise.h"

namespace cpudl::kernels {
namespace {

// Lane mask for the last n < 8 elements.
__m256i tail_mask(std::size_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

template <class Op>
void binary(const float* a, const float* b, float* out, std::size_t n, Op op) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 r0 = op(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 r1 = op(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    const __m256 r2 = op(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
    const __m256 r3 = op(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
    _mm256_storeu_ps(out + i, r0);
    _mm256_storeu_ps(out + i + 8, r1);
    _mm256_storeu_ps(out + i + 16, r2);
    _mm256_storeu_ps(out + i + 24, r3);
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, op(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    const __m256 r = op(_mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask));
    _mm256_maskstore_ps(out + i, mask, r);
  }
}

}  // namespace

void f32_add__avx2(const float* a, const float* b, float* out, std::size_t n) {
  binary(a, b, out, n, [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); });
}

void f32_mul__avx2(const float* a, const float* b, float* out, std::size_t n) {
  binary(a, b, out, n, [](__m256 x, __m256 y) { return _mm256_mul_ps(x, y); });
}

void f32_relu__avx2(const float* x, float* out, std::size_t n) {
  const __m256 zero = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_max_ps(zero, _mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, mask, _mm256_max_ps(zero, _mm256_maskload_ps(x + i, mask)));
  }
}

// Four independent accumulators hide the add latency so the loop runs at load bandwidth.
float f32_sum__avx2(const float* x, std::size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
  if (i < n) s1 = _mm256_add_ps(s1, _mm256_maskload_ps(x + i, tail_mask(n - i)));
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

}  // namespace cpudl::kernels
