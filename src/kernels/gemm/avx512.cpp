// AVX-512 14x32 GEMM microkernel: 28 zmm accumulators (14 rows x 2 vectors), two B loads and 14
// broadcast FMAs from A per k step. Fourteen rows make 28 independent chains, enough for two
// FMA pipes of latency 4 with room to spare, and leave 4 registers for B and the broadcasts.
// Measured alone on one core (A and B in L1, k = 128) it runs at ~90% of the FMA roof; in the blocked
// driver the k-loop's stream of A from L2 costs the rest (docs/BENCHMARKS.md).
//
// Edges are the tile's own: the row count is a template parameter (a 16-row product runs a
// 14-row and a 2-row tile, not two of 14), and the columns are masks on B's loads and C's loads
// and stores, so partial tiles are written in place.
#include <immintrin.h>

#include <utility>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/pack.inl"
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {

namespace {

constexpr int kWideRows = kGemmWideMr;

__mmask16 columns_mask(int cols) {
  return cols >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << cols) - 1);
}

// Full: all 32 columns, with plain loads and stores (the masked ones cost 3-6% in L1).
template <int Rows, bool Full>
void tile(const GemmTileArgs& t) {
  const __mmask16 m0 = Full ? __mmask16{0xffff} : columns_mask(t.cols);
  const __mmask16 m1 = Full ? __mmask16{0xffff} : t.cols > 16 ? columns_mask(t.cols - 16) : __mmask16{0};
  const auto load = [](__mmask16 m, const float* p) {
    if constexpr (Full)
      return _mm512_loadu_ps(p);
    else
      return _mm512_maskz_loadu_ps(m, p);
  };
  const auto store = [](__mmask16 m, float* p, __m512 v) {
    if constexpr (Full)
      _mm512_storeu_ps(p, v);
    else
      _mm512_mask_storeu_ps(p, m, v);
  };
  const float* a = t.a;
  const float* b = t.b;
  __m512 acc[Rows][2];
#pragma GCC unroll 14
  for (int i = 0; i < Rows; ++i) {
    acc[i][0] = _mm512_setzero_ps();
    acc[i][1] = _mm512_setzero_ps();
    // C's lines are needed only after the k loop: fetching them now hides their miss.
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc + t.cols - 1), _MM_HINT_T0);
  }
  for (std::int64_t p = 0; p < t.k; ++p) {
    const __m512 b0 = load(m0, b), b1 = load(m1, b + 16);
    _mm_prefetch(reinterpret_cast<const char*>(a + kWideRows * 8), _MM_HINT_T0);  // A, 8 steps ahead
#pragma GCC unroll 14
    for (int i = 0; i < Rows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kWideRows;
    b += kGemmWideNr;
  }
#pragma GCC unroll 14
  for (int i = 0; i < Rows; ++i) {
    float* ci = t.c + i * t.ldc;
    __m512 r0 = acc[i][0], r1 = acc[i][1];
    if (t.accumulate) {
      r0 = _mm512_add_ps(r0, load(m0, ci));
      r1 = _mm512_add_ps(r1, load(m1, ci + 16));
    }
    store(m0, ci, r0);
    store(m1, ci + 16, r1);
  }
}

template <int Rows>
void tile_rows(const GemmTileArgs& t) {
  if (t.cols == kGemmWideNr)
    tile<Rows, true>(t);
  else
    tile<Rows, false>(t);
}

template <int... Rows>
void tile_of_rows(const GemmTileArgs& t, std::integer_sequence<int, Rows...>) {
  using Fn = void (*)(const GemmTileArgs&);
  static constexpr Fn kTiles[] = {tile_rows<Rows + 1>...};
  kTiles[t.rows - 1](t);
}

}  // namespace

void f32_gemm_14x32__avx512(const GemmTileArgs& t) {
  if (t.rows <= 0 || t.cols <= 0) return;
  tile_of_rows(t, std::make_integer_sequence<int, kWideRows>{});
}

void f32_gemm_pack_14__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver) {
  pack_sliver<Avx512, kGemmWideMr>(a, lda, rows, kc, sliver);
}
void f32_gemm_pack_32__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver) {
  pack_sliver<Avx512, kGemmWideNr>(a, lda, rows, kc, sliver);
}

}  // namespace cpudl::kernels
