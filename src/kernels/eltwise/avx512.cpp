// AVX-512 variants of the f32 elementwise kernels: 4 x 16 lanes per iteration, mask-register tails.
#include <immintrin.h>

#include "kernels/eltwise/eltwise.h"

namespace cpudl::kernels {
namespace {

__mmask16 tail_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

template <class Op>
void binary(const float* a, const float* b, float* out, std::size_t n, Op op) {
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 r0 = op(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    const __m512 r1 = op(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    const __m512 r2 = op(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32));
    const __m512 r3 = op(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48));
    _mm512_storeu_ps(out + i, r0);
    _mm512_storeu_ps(out + i + 16, r1);
    _mm512_storeu_ps(out + i + 32, r2);
    _mm512_storeu_ps(out + i + 48, r3);
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, op(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, mask, op(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i)));
  }
}

}  // namespace

void f32_add__avx512(const float* a, const float* b, float* out, std::size_t n) {
  binary(a, b, out, n, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
}

void f32_mul__avx512(const float* a, const float* b, float* out, std::size_t n) {
  binary(a, b, out, n, [](__m512 x, __m512 y) { return _mm512_mul_ps(x, y); });
}

void f32_relu__avx512(const float* x, float* out, std::size_t n) {
  const __m512 zero = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_max_ps(zero, _mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, mask, _mm512_max_ps(zero, _mm512_maskz_loadu_ps(mask, x + i)));
  }
}

float f32_sum__avx512(const float* x, std::size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
  if (i < n) s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

}  // namespace cpudl::kernels
