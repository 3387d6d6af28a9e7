// AVX-512 GEMM microkernel and packings: the 14x32 tile (gemm/tile.inl; 28 zmm accumulators)
// and its slivers packed by 16x16 register transposes (gemm/pack.inl). Measured alone on one
// core (A and B in L1, k = 256) the tile runs at ~90% of the FMA roof
// (BM_gemm_microkernel_in_l1); in the blocked driver the k loop's stream of A from L2 costs the
// rest (docs/BENCHMARKS.md).
#include <immintrin.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/pack.inl"
#include "kernels/gemm/tile.inl"
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {

void f32_gemm_14x32__avx512(const GemmTileArgs& t) { gemm_tile_any<Avx512, kGemmWideMr>(t); }

void f32_gemm_pack_14__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver) {
  pack_sliver<Avx512, kGemmWideMr>(a, lda, rows, kc, sliver);
}
void f32_gemm_pack_32__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver) {
  pack_sliver<Avx512, kGemmWideNr>(a, lda, rows, kc, sliver);
}

}  // namespace cpudl::kernels
