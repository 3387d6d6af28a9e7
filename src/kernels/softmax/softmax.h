// Row-wise softmax, log-softmax and cross-entropy (with label smoothing). ref.cpp is the oracle
// (double precision); SIMD bodies in softmax.inl, compiled by avx2.cpp and avx512.cpp.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_SOFTMAX(isa)                                                                         \
  void f32_softmax__##isa(const float* x, float* y, std::size_t rows, std::size_t cols, std::size_t ld_in, \
                          std::size_t ld_out);                                                             \
  void f32_log_softmax__##isa(const float* x, float* y, std::size_t rows, std::size_t cols,                \
                              std::size_t ld_in, std::size_t ld_out);                                      \
  void f32_cross_entropy__##isa(const CrossEntropyArgs& args);

CPUDL_DECLARE_SOFTMAX(ref)
CPUDL_DECLARE_SOFTMAX(avx2)
CPUDL_DECLARE_SOFTMAX(avx512)
#undef CPUDL_DECLARE_SOFTMAX

}  // namespace cpudl::kernels
