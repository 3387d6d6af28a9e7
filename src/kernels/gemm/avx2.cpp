// AVX2+FMA GEMM microkernels: the packed 6x16 tile (gemm/tile.inl; 12 ymm accumulators, two B
// loads and six broadcasts per k step: 12 FMAs per 8 loads keeps both FMA pipes busy), its
// slivers packed by 8x8 register transposes (gemm/pack.inl), and the weight-rows form below.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/pack.inl"
#include "kernels/gemm/tile.inl"
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {

void f32_gemm_6x16__avx2(const GemmTileArgs& t) { gemm_tile_any<Avx2, kGemmMr>(t); }

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

void f32_gemm_pack_6__avx2(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                           float* sliver) {
  pack_sliver<Avx2, kGemmMr>(a, lda, rows, kc, sliver);
}
void f32_gemm_pack_16__avx2(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                            float* sliver) {
  pack_sliver<Avx2, kGemmNr>(a, lda, rows, kc, sliver);
}

}  // namespace cpudl::kernels
