// AVX2+FMA 6x16 GEMM microkernel: 12 ymm accumulators (6 rows x 2 vectors), two B loads and one
// broadcast per row per k step: 12 FMAs per 3 loads keeps both FMA pipes busy.
#include <immintrin.h>

#include "kernels/gemm/gemm.h"

namespace cpudl::kernels {

void f32_gemm_6x16__avx2(std::int64_t k, const float* a, const float* b, float* c, std::int64_t ldc,
                         bool accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (std::int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, b0, c00);
    c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10);
    c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20);
    c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30);
    c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, b0, c40);
    c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, b0, c50);
    c51 = _mm256_fmadd_ps(ai, b1, c51);
    a += kGemmMr;
    b += kGemmNr;
  }
  const __m256 rows[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < kGemmMr; ++i) {
    float* ci = c + i * ldc;
    __m256 r0 = rows[i][0], r1 = rows[i][1];
    if (accumulate) {
      r0 = _mm256_add_ps(r0, _mm256_loadu_ps(ci));
      r1 = _mm256_add_ps(r1, _mm256_loadu_ps(ci + 8));
    }
    _mm256_storeu_ps(ci, r0);
    _mm256_storeu_ps(ci + 8, r1);
  }
}

}  // namespace cpudl::kernels
