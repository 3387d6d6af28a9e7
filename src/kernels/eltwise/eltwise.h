// f32 elementwise kernels, forward and backward, one definition per ISA level: ref.cpp (the
// oracle), avx2.cpp and avx512.cpp (bodies shared in eltwise.inl). Each works on one contiguous
// range on the calling thread; ops split large tensors across the pool.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_ELTWISE(isa)                                                             \
  void f32_add__##isa(const float* a, const float* b, float* out, std::size_t n);              \
  void f32_sub__##isa(const float* a, const float* b, float* out, std::size_t n);              \
  void f32_mul__##isa(const float* a, const float* b, float* out, std::size_t n);              \
  void f32_div__##isa(const float* a, const float* b, float* out, std::size_t n);              \
  void f32_relu__##isa(const float* x, float* out, std::size_t n);                             \
  void f32_gelu__##isa(const float* x, float* out, std::size_t n);                             \
  void f32_sigmoid__##isa(const float* x, float* out, std::size_t n);                          \
  void f32_tanh__##isa(const float* x, float* out, std::size_t n);                             \
  void f32_exp__##isa(const float* x, float* out, std::size_t n);                              \
  void f32_log__##isa(const float* x, float* out, std::size_t n);                              \
  void f32_relu_backward__##isa(const float* x, const float* dy, float* dx, std::size_t n);    \
  void f32_gelu_backward__##isa(const float* x, const float* dy, float* dx, std::size_t n);    \
  void f32_sigmoid_backward__##isa(const float* y, const float* dy, float* dx, std::size_t n); \
  void f32_tanh_backward__##isa(const float* y, const float* dy, float* dx, std::size_t n);    \
  void f32_swiglu__##isa(const float* gate, const float* up, float* out, std::size_t n);       \
  void f32_add_relu__##isa(const float* a, const float* b, float* out, std::size_t n);

CPUDL_DECLARE_ELTWISE(ref)
CPUDL_DECLARE_ELTWISE(avx2)
CPUDL_DECLARE_ELTWISE(avx512)
#undef CPUDL_DECLARE_ELTWISE

}  // namespace cpudl::kernels
