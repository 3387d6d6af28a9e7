// Kernels of the LLM path: weight x activation products for each GGUF weight type, and the row
// quantisers that put activations in the formats the integer products take (Q8_0 for Q8_0/Q4_0
// weights, Q8_K for the K-quants). ref.cpp is the oracle; avx2.cpp the AVX2 + FMA + F16C path;
// the integer products (int8_products.inl) are also built as avx512_vnni.cpp, on VPDPBUSD;
// avx512.cpp packs the sixteen-row panels at load.
//
// The integer products multiply int8 pairs exactly and scale each block's int32 sum in float,
// the arithmetic of ggml's own kernels, so cpudl and llama.cpp see the same rounding of the
// activations.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_QUANT(isa)                                                                      \
  void f32_f32_matmul__##isa(const WeightMatmulArgs& a);                                              \
  void f16_f32_matmul__##isa(const WeightMatmulArgs& a);                                              \
  void bf16_f32_matmul__##isa(const WeightMatmulArgs& a);                                             \
  void q8_0_q8a_matmul__##isa(const WeightMatmulArgs& a);                                             \
  void q4_0_q8a_matmul__##isa(const WeightMatmulArgs& a);                                             \
  void quantize_row_q8a__##isa(const float* x, void* blocks, std::size_t k);                          \
  void dequantize_row_f16__##isa(const void* in, float* out, std::size_t k);                          \
  void dequantize_row_bf16__##isa(const void* in, float* out, std::size_t k);                         \
  void dequantize_row_q8_0__##isa(const void* in, float* out, std::size_t k);                         \
  void dequantize_row_q4_0__##isa(const void* in, float* out, std::size_t k);                         \
  void pack_q4_0x8__##isa(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,            \
                          Q4_0x8Block* panel);                                                        \
  void q4_0x8_q8a_gemm__##isa(const Q4_0x8Block* panel, std::size_t k, const void* x,                 \
                              std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy, \
                              int rows);                                                              \
  void pack_q8_0x8__##isa(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,            \
                          Q8_0x8Block* panel);
// The K-quants.
#define CPUDL_DECLARE_KQUANT(isa)                                             \
  void q4_k_q8_k_matmul__##isa(const WeightMatmulArgs& a);                    \
  void q6_k_q8_k_matmul__##isa(const WeightMatmulArgs& a);                    \
  void quantize_row_q8_k__##isa(const float* x, void* blocks, std::size_t k); \
  void dequantize_row_q4_k__##isa(const void* in, float* out, std::size_t k); \
  void dequantize_row_q6_k__##isa(const void* in, float* out, std::size_t k);

CPUDL_DECLARE_QUANT(ref)
CPUDL_DECLARE_QUANT(avx2)
void q8_0_q8a_matmul__avx512_vnni(const WeightMatmulArgs& a);
// Q4_K generation panels (kernel_types.h's Q4_Kx16Block): the pack (portable, once per matrix at
// load), the reference gemv and the VNNI one.
void pack_q4_kx16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q4_Kx16Block* panel);
void q4_kx16_q8_k_gemv__ref(const Q4_Kx16Block* panel, std::size_t k, const void* x, float* y,
                            std::size_t rows);
void q4_kx16_q8_k_gemv__avx512_vnni(const Q4_Kx16Block* panel, std::size_t k, const void* x, float* y,
                                    std::size_t rows);
// Q6_K generation panels (kernel_types.h's Q6_Kx16Block): as Q4_K's.
// Several tokens over the Q4_K and Q6_K panels (prompts): y[t * ldy + r] for t < tokens, r < rows <= 16.
void q4_kx16_q8_k_gemm__ref(const Q4_Kx16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                            std::size_t tokens, float* y, std::size_t ldy, int rows);
void q4_kx16_q8_k_gemm__avx512_vnni(const Q4_Kx16Block* panel, std::size_t k, const void* x,
                                    std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                    int rows);
void q6_kx16_q8_k_gemm__ref(const Q6_Kx16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                            std::size_t tokens, float* y, std::size_t ldy, int rows);
void q6_kx16_q8_k_gemm__avx512_vnni(const Q6_Kx16Block* panel, std::size_t k, const void* x,
                                    std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                    int rows);
void pack_q6_kx16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q6_Kx16Block* panel);
// The sixteen-row panels' packs on AVX-512 (avx512.cpp): bytes identical to the references'.
void pack_q8_0x16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q8_0x16Block* panel);
void pack_q4_0x16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q8_0x16Block* panel);
void pack_q4_0x16_nibbles__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                                  Q4_0x16Block* panel);
void pack_q4_kx16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q4_Kx16Block* panel);
void pack_q6_kx16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q6_Kx16Block* panel);
void q6_kx16_q8_k_gemv__ref(const Q6_Kx16Block* panel, std::size_t k, const void* x, float* y,
                            std::size_t rows);
void q6_kx16_q8_k_gemv__avx512_vnni(const Q6_Kx16Block* panel, std::size_t k, const void* x, float* y,
                                    std::size_t rows);
void q4_0_q8a_matmul__avx512_vnni(const WeightMatmulArgs& a);
void q4_0x8_q8a_gemm__avx512_vnni(const Q4_0x8Block* panel, std::size_t k, const void* x,
                                  std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                  int rows);
// The Q8_0 panel's product: VNNI only (kernel_types.h's Q8_0x8Block says why), and the oracle.
void q8_0x8_q8a_gemm__ref(const Q8_0x8Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                          std::size_t tokens, float* y, std::size_t ldy, int rows);
void q8_0x8_q8a_gemm__avx512_vnni(const Q8_0x8Block* panel, std::size_t k, const void* x,
                                  std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                  int rows);
// The AMX tile product (kernel_types.h's Q8_0x16Block) and its oracle; its packs run once per
// matrix at load.
void pack_q8_0x16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q8_0x16Block* panel);
void pack_q4_0x16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q8_0x16Block* panel);
void q8_0x16_q8a_gemm__ref(const Q8_0x16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                           std::size_t tokens, float* y, std::size_t ldy, int rows);
void q8_0x16_q8a_gemv__ref(const Q8_0x16Block* panel, std::size_t k, const void* x, float* y,
                           std::size_t rows);
void q8_0x16_q8a_gemv__avx512_vnni(const Q8_0x16Block* panel, std::size_t k, const void* x, float* y,
                                   std::size_t rows);
void pack_q4_0x16_nibbles__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                               Q4_0x16Block* panel);
void q4_0x16_q8a_gemv__ref(const Q4_0x16Block* panel, std::size_t k, const void* x, float* y,
                           std::size_t rows);
void q4_0x16_q8a_gemv__avx512_vnni(const Q4_0x16Block* panel, std::size_t k, const void* x, float* y,
                                   std::size_t rows);
void q8_0x16_q8a_dot_gemm__avx512_vnni(const Q8_0x16Block* panel, std::size_t k, const void* x,
                                       std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                       int rows);
void q4_0x16_q8a_gemm__ref(const Q4_0x16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                           std::size_t tokens, float* y, std::size_t ldy, int rows);
void q4_0x16_q8a_gemm__avx512_vnni(const Q4_0x16Block* panel, std::size_t k, const void* x,
                                   std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                   int rows);
void q8_0x16_q8a_gemm__amx(const Q8_0x16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                           std::size_t tokens, float* y, std::size_t ldy, int rows);
CPUDL_DECLARE_KQUANT(ref)
CPUDL_DECLARE_KQUANT(avx2)
#undef CPUDL_DECLARE_QUANT
#undef CPUDL_DECLARE_KQUANT

}  // namespace cpudl::kernels
