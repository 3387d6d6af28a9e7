// AVX2+FMA 6x16 GEMM microkernels: 12 ymm accumulators (6 rows x 2 vectors), two B loads and one
// broadcast per row per k step: 12 FMAs per 8 loads keeps both FMA pipes busy.
#include <immintrin.h>

#include <algorithm>

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

// Twelve accumulators as in the packed kernel; the six broadcasts come from six row streams.
// Per k step the loads are 64 bytes of B (from L2: 16 tokens x k floats) and 24 of A (L1), where
// a dot-product form (3 rows x 4 tokens along k) pulls 128 bytes of activations from L2.
void f32_gemm_rows_6x16__avx2(const GemmRowsArgs& g) {
  const std::int64_t k = g.k, lda = g.lda;
  const int rows = g.rows;
  const float* a = g.a;
  const float* b = g.b_panel;
  // Missing rows repeat row 0: computed, never stored.
  const float* a0 = a;
  const float* a1 = rows > 1 ? a + lda : a;
  const float* a2 = rows > 2 ? a + 2 * lda : a;
  const float* a3 = rows > 3 ? a + 3 * lda : a;
  const float* a4 = rows > 4 ? a + 4 * lda : a;
  const float* a5 = rows > 5 ? a + 5 * lda : a;
  const char* prefetch = static_cast<const char*>(g.prefetch);
  std::int64_t prefetch_left = g.prefetch_lines;
  const std::int64_t prefetch_every =
      prefetch_left > 0 ? std::max<std::int64_t>(2, k / prefetch_left) : k + 1;
  std::int64_t countdown = prefetch_every;
  // Twelve named accumulators, the six rows written out: as arrays walked by unrolled loops GCC
  // 12 spilled accumulators to the stack inside the k loop.
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  auto step = [&](std::int64_t p) {
    const __m256 b0 = _mm256_loadu_ps(b + p * kGemmNr), b1 = _mm256_loadu_ps(b + p * kGemmNr + 8);
    __m256 ai = _mm256_broadcast_ss(a0 + p);
    c00 = _mm256_fmadd_ps(ai, b0, c00);
    c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a1 + p);
    c10 = _mm256_fmadd_ps(ai, b0, c10);
    c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a2 + p);
    c20 = _mm256_fmadd_ps(ai, b0, c20);
    c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a3 + p);
    c30 = _mm256_fmadd_ps(ai, b0, c30);
    c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a4 + p);
    c40 = _mm256_fmadd_ps(ai, b0, c40);
    c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a5 + p);
    c50 = _mm256_fmadd_ps(ai, b0, c50);
    c51 = _mm256_fmadd_ps(ai, b1, c51);
  };
  // Two steps per iteration: one index update and one prefetch check per 24 FMAs (per step,
  // six pointer increments and the check took front-end slots the FMAs needed).
  std::int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    if ((countdown -= 2) <= 0 && prefetch_left > 0) {
      _mm_prefetch(prefetch, _MM_HINT_T0);
      prefetch += 64;
      --prefetch_left;
      countdown += prefetch_every;
    }
    step(p);
    step(p + 1);
  }
  for (; p < k; ++p) step(p);
  alignas(32) float tile[kGemmMr][kGemmNr];
  const __m256 acc[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < kGemmMr; ++i) {
    _mm256_store_ps(tile[i], acc[i][0]);
    _mm256_store_ps(tile[i] + 8, acc[i][1]);
  }
  for (; prefetch_left > 0; --prefetch_left, prefetch += 64) _mm_prefetch(prefetch, _MM_HINT_T0);
  for (int j = 0; j < g.cols; ++j)
    for (int i = 0; i < rows; ++i) g.c[j * g.ldc + i] = tile[i][j];
}

}  // namespace cpudl::kernels
