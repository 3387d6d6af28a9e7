// Winograd F(4x4, 3x3) convolution kernels (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016): each 4 x 4 block of outputs comes from a 6 x 6 input patch through
// y = A^T [ (G g G^T) (.) (B^T d B) ] A, so a 3x3 convolution costs 36 multiply-adds per 16
// outputs and channel pair instead of 144 -- the product over channels becomes 36 independent
// GEMMs (tiles x C) (C x K). oneDNN 2.6 has no Winograd path for AVX2 and runs ResNet-18's 3x3
// layers at 50-90% of the fp32 roof here, so these kernels (with the driver in
// src/dense/conv/winograd_conv.cpp) carry the stride-1 3x3 convolutions of the inference runtime and of
// training.
//
// F(2x2, 3x3) (a 4 x 4 patch per 2 x 2 outputs, 16 positions: 2.25x fewer multiplies instead of
// 4x) serves layers with few tiles, where reading F(4x4)'s 4x larger transformed weights would
// cost more than its arithmetic saves (batch 1 at 7x7 pixels, 512 channels: 38 MB against 17).
//
// The weight transform runs once when the inference runtime prepares a convolution, and on every
// call in training, where the weights change each step (and the backward-data pass transforms
// the rotated, transposed kernel): the AVX2 variant, in fp32 with G factored, writes the
// transformed weights at memory speed; the reference computes in double.
//
// Training's weight gradient runs the same algebra backwards (F(4x4) only: training takes layers
// with enough tiles for it): Y = A^T [sum_c U (.) V] A gives dU = sum over tiles of
// V (.) (A dY A^T), then dW = G^T dU G. The input transform is the forward's; the gradient's
// transform, the per-position product (reduced over tiles, output C x K) and the inverse weight
// transform are the three kernels below.
//
// The transforms are exact in real arithmetic; in fp32 the interpolation points 0, +-1, +-2
// amplify rounding over a direct convolution: up to ~1e-5 of a layer's output scale measured
// with F(4x4) (2.5e-6 with F(2x2)), well inside ONNX models' tolerances.
//
// Three kernels, the driver calling them per block of tiles so that the transformed block stays
// in cache: the input transform writes V (36 or 16 positions x tiles x C), the GEMM multiplies each
// position by the transformed weights U (packed in 16-column panels by the driver) into M, and
// the output transform adds bias and residual, clamps (ReLU or Clip) and writes the blocked
// output. Channel vectors are the SIMD dimension throughout, as the blocked layout stores them.
#pragma once

#include <cstddef>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

inline constexpr std::size_t kWinogradGemmColumns = 16;  // the weight panel width

#define CPUDL_DECLARE_WINOGRAD(isa)                                                                          \
  void f32_winograd_input_4x3__##isa(const WinogradShape& s, const float* x, std::size_t first_tile,         \
                                     std::size_t tiles, float* v, std::size_t v_rows);                       \
  void f32_winograd_input_2x3__##isa(const WinogradShape& s, const float* x, std::size_t first_tile,         \
                                     std::size_t tiles, float* v, std::size_t v_rows);                       \
  void f32_winograd_gemm__##isa(std::size_t positions, const float* v, const float* u, float* m,             \
                                std::size_t tiles, std::size_t v_rows, std::size_t channels,                 \
                                std::size_t out_channels, std::size_t k_begin, std::size_t k_end);           \
  void f32_winograd_output_4x3__##isa(const WinogradShape& s, const float* m, std::size_t first_tile,        \
                                      std::size_t tiles, std::size_t v_rows, std::size_t k_begin,            \
                                      std::size_t k_end, const WinogradEpilogue& e, float* y);               \
  void f32_winograd_output_2x3__##isa(const WinogradShape& s, const float* m, std::size_t first_tile,        \
                                      std::size_t tiles, std::size_t v_rows, std::size_t k_begin,            \
                                      std::size_t k_end, const WinogradEpilogue& e, float* y);               \
  void f32_winograd_weights_4x3__##isa(const float* weights, std::size_t channels, std::size_t out_channels, \
                                       bool backward_data, std::size_t k_begin, std::size_t k_end,           \
                                       float* u);                                                            \
  void f32_winograd_weights_2x3__##isa(const float* weights, std::size_t channels, std::size_t out_channels, \
                                       bool backward_data, std::size_t k_begin, std::size_t k_end,           \
                                       float* u);                                                            \
  void f32_winograd_output_grad_4x3__##isa(const WinogradShape& s, const float* dy, std::size_t first_tile,  \
                                           std::size_t tiles, std::size_t v_rows, std::size_t k_begin,       \
                                           std::size_t k_end, float* m);                                     \
  void f32_winograd_gemm_weights__##isa(const float* v, const float* m, float* du, std::size_t tiles,        \
                                        std::size_t v_rows, std::size_t channels, std::size_t out_channels,  \
                                        std::size_t k_begin, std::size_t k_end, bool accumulate);            \
  void f32_winograd_weight_grad_4x3__##isa(const float* du, std::size_t channels, std::size_t out_channels,  \
                                           std::size_t k_begin, std::size_t k_end, float* dw);
CPUDL_DECLARE_WINOGRAD(ref)
CPUDL_DECLARE_WINOGRAD(avx2)
// AVX-512: the two products (avx512.cpp); the transforms stay on AVX2.
void f32_winograd_gemm__avx512(std::size_t positions, const float* v, const float* u, float* m,
                               std::size_t tiles, std::size_t v_rows, std::size_t channels,
                               std::size_t out_channels, std::size_t k_begin, std::size_t k_end);
void f32_winograd_gemm_weights__avx512(const float* v, const float* m, float* du, std::size_t tiles,
                                       std::size_t v_rows, std::size_t channels, std::size_t out_channels,
                                       std::size_t k_begin, std::size_t k_end, bool accumulate);
#undef CPUDL_DECLARE_WINOGRAD

}  // namespace cpudl::kernels
