// Portable 6x16 GEMM microkernel: the reference for the ISA variants.
#include "kernels/gemm/gemm.h"

namespace cpudl::kernels {

void f32_gemm_6x16__ref(const GemmTileArgs& t) {
  float acc[kGemmMr][kGemmNr] = {};
  for (std::int64_t p = 0; p < t.k; ++p)
    for (int i = 0; i < t.rows; ++i)
      for (int j = 0; j < t.cols; ++j) acc[i][j] += t.a[p * kGemmMr + i] * t.b[p * kGemmNr + j];
  for (int i = 0; i < t.rows; ++i)
    for (int j = 0; j < t.cols; ++j) {
      float& c = t.c[i * t.ldc + j];
      c = (t.accumulate ? c : 0.0f) + acc[i][j];
    }
}

namespace {
template <int Mr>
void pack_rows(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc, float* sliver) {
  for (std::int64_t p = 0; p < kc; ++p)
    for (std::int64_t i = 0; i < Mr; ++i) sliver[p * Mr + i] = i < rows ? a[i * lda + p] : 0.0f;
}
}  // namespace

void f32_gemm_pack_6__ref(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                          float* sliver) {
  pack_rows<kGemmMr>(a, lda, rows, kc, sliver);
}
void f32_gemm_pack_16__ref(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                           float* sliver) {
  pack_rows<kGemmNr>(a, lda, rows, kc, sliver);
}

void f32_gemm_rows_6x16__ref(const GemmRowsArgs& g) {
  for (int i = 0; i < g.rows; ++i)
    for (int j = 0; j < g.cols; ++j) {
      float acc = 0.0f;
      for (std::int64_t p = 0; p < g.k; ++p) acc += g.a[i * g.lda + p] * g.b_panel[p * kGemmNr + j];
      g.c[j * g.ldc + i] = acc;
    }
}

}  // namespace cpudl::kernels
