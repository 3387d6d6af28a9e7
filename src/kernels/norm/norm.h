// Layer normalisation over the last dimension, forward and backward; RMSNorm (the LLM forward). ref.cpp is
// the oracle (double); SIMD bodies in norm.inl, compiled by avx2.cpp and avx512.cpp.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_NORM(isa)                                                                       \
  void f32_layer_norm_forward__##isa(const float* x, const float* gamma, const float* beta, float* y, \
                                     float* mean, float* rstd, std::size_t rows, std::size_t cols,    \
                                     float epsilon);                                                  \
  void f32_layer_norm_backward__##isa(const float* x, const float* dy, const float* gamma,            \
                                      const float* mean, const float* rstd, float* dx, float* dgamma, \
                                      float* dbeta, std::size_t rows, std::size_t cols);              \
  void f32_rms_norm__##isa(const float* x, const float* weight, float* y, std::size_t rows,           \
                           std::size_t cols, float epsilon);

CPUDL_DECLARE_NORM(ref)
CPUDL_DECLARE_NORM(avx2)
CPUDL_DECLARE_NORM(avx512)
#undef CPUDL_DECLARE_NORM

}  // namespace cpudl::kernels
