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

namespace {

// r[0..15] (16 rows of 16) transposed in place: r[q] = column q. Three stages of lane shuffles:
// pairs of rows interleaved, 4-float column pieces gathered, then 128-bit blocks exchanged twice.
void transpose_16x16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

}  // namespace

// Full slivers: 16 steps at a time, the 14 rows' 16 columns (two zero rows below) transposed in
// registers; step p's 14 floats are lanes 0-13 of column p, stored masked (no write past the
// sliver). Partial slivers (the last rows of A) and the last kc % 16 steps go one float at a time.
void f32_gemm_pack_14__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver) {
  constexpr int kRows = kGemmWideMr;
  constexpr __mmask16 kStep = (1u << kRows) - 1;
  std::int64_t p = 0;
  if (rows == kRows)
    for (; p + 16 <= kc; p += 16) {
      __m512 r[16];
      for (int i = 0; i < kRows; ++i) r[i] = _mm512_loadu_ps(a + i * lda + p);
      for (int i = kRows; i < 16; ++i) r[i] = _mm512_setzero_ps();
      transpose_16x16(r);
      for (int q = 0; q < 16; ++q) _mm512_mask_storeu_ps(sliver + (p + q) * kRows, kStep, r[q]);
    }
  for (; p < kc; ++p)
    for (std::int64_t i = 0; i < kRows; ++i) sliver[p * kRows + i] = i < rows ? a[i * lda + p] : 0.0f;
}

}  // namespace cpudl::kernels
