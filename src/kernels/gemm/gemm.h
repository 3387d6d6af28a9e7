// f32 GEMM microkernels (BLIS-style): C[6 x 16] (+)= A_panel B_panel over k, where A_panel holds
// 6 rows of A packed column by column (a[p * 6 + i]) and B_panel 16 columns of B packed row by
// row (b[p * 16 + j]). The blocked driver that packs and loops is portable (src/blas/native_gemm.cpp).
#pragma once

#include <cstdint>

namespace cpudl::kernels {

inline constexpr int kGemmMr = 6, kGemmNr = 16;

// accumulate: add to C instead of overwriting it. Full 6 x 16 tiles only (edges go through a
// temporary tile in the driver).
#define CPUDL_DECLARE_GEMM(isa)                                                                   \
  void f32_gemm_6x16__##isa(std::int64_t k, const float* a_panel, const float* b_panel, float* c, \
                            std::int64_t ldc, bool accumulate);

CPUDL_DECLARE_GEMM(ref)
CPUDL_DECLARE_GEMM(avx2)
#undef CPUDL_DECLARE_GEMM

}  // namespace cpudl::kernels
