// AVX-512 14x32 GEMM microkernel: 28 zmm accumulators (14 rows x 2 vectors), two B loads and 14
// broadcast FMAs from A per k step. Fourteen rows make 28 independent chains, enough for two
// FMA pipes of latency 4 with room to spare, and leave 4 registers for B and the broadcasts.
// Measured alone on one core (A and B in L1, k = 128) it runs at ~90% of the FMA roof; in the blocked
// driver the k-loop's stream of A from L2 costs the rest (docs/BENCHMARKS.md).
#include <immintrin.h>

#include "kernels/gemm/gemm.h"

namespace cpudl::kernels {

void f32_gemm_14x32__avx512(std::int64_t k, const float* a, const float* b, float* c, std::int64_t ldc,
                            bool accumulate) {
  constexpr int kRows = kGemmWideMr;
  __m512 acc[kRows][2];
  for (int i = 0; i < kRows; ++i) {
    acc[i][0] = _mm512_setzero_ps();
    acc[i][1] = _mm512_setzero_ps();
    // C's lines are needed only after the k loop: fetching them now hides their miss.
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  for (std::int64_t p = 0; p < k; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(a + kRows * 8), _MM_HINT_T0);  // A, 8 steps ahead
#pragma GCC unroll 14
    for (int i = 0; i < kRows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kRows;
    b += kGemmWideNr;
  }
  for (int i = 0; i < kRows; ++i) {
    float* ci = c + i * ldc;
    __m512 r0 = acc[i][0], r1 = acc[i][1];
    if (accumulate) {
      r0 = _mm512_add_ps(r0, _mm512_loadu_ps(ci));
      r1 = _mm512_add_ps(r1, _mm512_loadu_ps(ci + 16));
    }
    _mm512_storeu_ps(ci, r0);
    _mm512_storeu_ps(ci + 16, r1);
  }
}

}  // namespace cpudl::kernels
