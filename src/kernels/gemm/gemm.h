// f32 GEMM microkernels (BLIS-style): C[6 x 16] (+)= A_panel B_panel over k, where A_panel holds
// 6 rows of A packed column by column (a[p * 6 + i]) and B_panel 16 columns of B packed row by
// row (b[p * 16 + j]); the AVX-512 tile is 14 x 32, packed the same way. Each tile takes its own
// edges (GemmTileArgs: rows <= mr, cols <= nr, masked columns), so the driver needs no scratch
// tile and computes no padding rows: ResNet-18's fc (16 x 1000 x 512) ran a 14-row and a 2-row
// tile instead of two of 14. The blocked driver that packs and loops is portable
// (src/dense/blas/native_gemm.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

inline constexpr int kGemmMr = 6, kGemmNr = 16;

#define CPUDL_DECLARE_GEMM(isa) void f32_gemm_6x16__##isa(const GemmTileArgs& args);

CPUDL_DECLARE_GEMM(ref)
CPUDL_DECLARE_GEMM(avx2)
#undef CPUDL_DECLARE_GEMM

// The AVX-512 tile, C[14 x 32], same contract with 14-row A and 32-column B slivers.
inline constexpr int kGemmWideMr = 14, kGemmWideNr = 32;
void f32_gemm_14x32__avx512(const GemmTileArgs& args);

// n floats from src to dst, n a tile's mr or nr (the packing loops of the drivers): a fixed-size
// copy inlines to a few vector moves, where the library call for 56-128 bytes took a quarter of
// the implicit-GEMM weight gradient's time (perf, 3x3/2 layer) and a third of the native
// SGEMM's at 16x1000x512.
template <std::int64_t N>
void copy_fixed_floats(const float* src, float* dst) {
  std::memcpy(dst, src, N * sizeof(float));
}
inline void copy_tile_floats(const float* src, std::int64_t n, float* dst) {
  switch (n) {
    case 32:
      return copy_fixed_floats<32>(src, dst);
    case 16:
      return copy_fixed_floats<16>(src, dst);
    case 14:
      return copy_fixed_floats<14>(src, dst);
    case 6:
      return copy_fixed_floats<6>(src, dst);
    default:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  }
}

// Sliver packings (GemmPackFn): pack_a's A slivers of mr rows and pack_b's slivers of a
// transposed op(B), nr rows of B (gemm/pack.inl: register transposes of W rows at a time; the
// portable ones move one float at a time). Scalar packing took a tenth of the 14x32 driver's
// time at 1024^3, and a transposed B 40-75% more than an untransposed one at 128x3072x768 and
// 64x1024x784 (one thread).
void f32_gemm_pack_6__ref(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                          float* sliver);
void f32_gemm_pack_16__ref(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                           float* sliver);
void f32_gemm_pack_6__avx2(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                           float* sliver);
void f32_gemm_pack_16__avx2(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                            float* sliver);
void f32_gemm_pack_14__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver);
void f32_gemm_pack_32__avx512(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                              float* sliver);

// The weight-rows form, for LLM prompts (y = x W^T): c[j * ldc + i] = sum_p a[i * lda + p] *
// b_panel[p * 16 + j] for i < rows (<= 6) and j < cols (<= 16). A's rows are read where they
// are -- rows of a weight matrix, K contiguous, in the memory map or dequantised into a small
// panel -- and broadcast one element at a time, so the weights are never transposed; B (16
// tokens' activations) is packed as above, once per call. The tile is stored transposed,
// token-major, as y[token][row] wants it, overwriting C. Rows past `rows` are not read.
// `prefetch_lines` lines from `prefetch` (the caller's next weights) are prefetched spread over
// the k loop: issued in a burst, they stalled on the few outstanding misses a core tracks.
#define CPUDL_DECLARE_GEMM_ROWS(isa) void f32_gemm_rows_6x16__##isa(const GemmRowsArgs& args);

CPUDL_DECLARE_GEMM_ROWS(ref)
CPUDL_DECLARE_GEMM_ROWS(avx2)
#undef CPUDL_DECLARE_GEMM_ROWS

}  // namespace cpudl::kernels
