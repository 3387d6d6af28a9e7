// AVX2+FMA 6x16 GEMM microkernels: 12 ymm accumulators (6 rows x 2 vectors), two B loads and one
// broadcast per row per k step: 12 FMAs per 8 loads keeps both FMA pipes busy. The packed tile's
// edges are its own, as the AVX-512 tile's (gemm.h): rows by template, partial columns by
// VMASKMOV loads and stores (slower than plain moves, so full tiles keep those).
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/pack.inl"
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {

namespace {

__m256i columns_mask(int cols) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lanes);
}

template <bool Masked>
__m256 load(const float* p, __m256i mask) {
  if constexpr (Masked)
    return _mm256_maskload_ps(p, mask);
  else
    return _mm256_loadu_ps(p);
}

template <bool Masked>
void store(float* p, __m256i mask, __m256 v) {
  if constexpr (Masked)
    _mm256_maskstore_ps(p, mask, v);
  else
    _mm256_storeu_ps(p, v);
}

template <int Rows, bool Masked>
void tile(const GemmTileArgs& t) {
  const __m256i m0 = columns_mask(t.cols), m1 = columns_mask(t.cols - 8);
  const float* a = t.a;
  const float* b = t.b;
  __m256 acc[Rows][2];
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (std::int64_t p = 0; p < t.k; ++p) {
    const __m256 b0 = load<Masked>(b, m0), b1 = load<Masked>(b + 8, m1);
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kGemmMr;
    b += kGemmNr;
  }
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i) {
    float* ci = t.c + i * t.ldc;
    __m256 r0 = acc[i][0], r1 = acc[i][1];
    if (t.accumulate) {
      r0 = _mm256_add_ps(r0, load<Masked>(ci, m0));
      r1 = _mm256_add_ps(r1, load<Masked>(ci + 8, m1));
    }
    store<Masked>(ci, m0, r0);
    store<Masked>(ci + 8, m1, r1);
  }
}

template <int Rows>
void tile_rows(const GemmTileArgs& t) {
  if (t.cols == kGemmNr)
    tile<Rows, false>(t);
  else
    tile<Rows, true>(t);
}

template <int... Rows>
void tile_of_rows(const GemmTileArgs& t, std::integer_sequence<int, Rows...>) {
  using Fn = void (*)(const GemmTileArgs&);
  static constexpr Fn kTiles[] = {tile_rows<Rows + 1>...};
  kTiles[t.rows - 1](t);
}

}  // namespace

void f32_gemm_6x16__avx2(const GemmTileArgs& t) {
  if (t.rows <= 0 || t.cols <= 0) return;
  tile_of_rows(t, std::make_integer_sequence<int, kGemmMr>{});
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

void f32_gemm_pack_6__avx2(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                           float* sliver) {
  pack_sliver<Avx2, kGemmMr>(a, lda, rows, kc, sliver);
}
void f32_gemm_pack_16__avx2(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                            float* sliver) {
  pack_sliver<Avx2, kGemmNr>(a, lda, rows, kc, sliver);
}

}  // namespace cpudl::kernels
