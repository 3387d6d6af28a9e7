// Fused optimiser updates: one pass over parameter, gradient and state, exactly PyTorch's rules
// (torch/optim/sgd.py, adam.py, adamw.py of 1.13). ref.cpp is the oracle; SIMD bodies in
// optim.inl, compiled by avx2.cpp and avx512.cpp.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_OPTIM(isa)                                                                   \
  void f32_sgd_step__##isa(float* param, const float* grad, float* momentum_buffer, std::size_t n, \
                           const SgdParams& p);                                                    \
  void f32_adam_step__##isa(float* param, const float* grad, float* m, float* v, std::size_t n,    \
                            const AdamParams& p);

CPUDL_DECLARE_OPTIM(ref)
CPUDL_DECLARE_OPTIM(avx2)
CPUDL_DECLARE_OPTIM(avx512)
#undef CPUDL_DECLARE_OPTIM

}  // namespace cpudl::kernels
