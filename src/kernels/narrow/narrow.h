// Linear layers with few outputs (n <= 16: a classifier such as SimpleCNN's 21632 -> 10), whose
// three products are far from a square GEMM: the forward pass is n dot products per row, the
// data gradient an outer product with an inner dimension of n, the weight gradient a sum of m
// outer products into an n x k matrix. Each streams an m x k activation through memory once
// and does 2n FLOPs per element of it, so all three are bound by memory, not arithmetic. oneDNN's
// inner product (GEMM micro-kernels with packing) ran them at 5-30% of that bound here
// (SimpleCNN's fc at batch 256, 1 thread: forward 4.9 ms, data 6.2 ms, weights 12 ms, against
// ~1.8 ms to read 22 MB). These kernels walk the activation once in its storage order.
//
// Row-major; `ld` is the row stride of x, w, dx and dw (a column range [0, k) of wider
// matrices, so that threads can split k). y and dx are written; the weight gradient is added
// into dw, so that batches processed in pieces (ops/planar_conv.cpp) sum into one buffer.
#pragma once

#include <cstddef>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

inline constexpr std::size_t kNarrowLinearMaxOutputs = 16;

#define CPUDL_DECLARE_NARROW(isa)                                                                           \
  void f32_narrow_linear_forward__##isa(const float* x, const float* w, float* y, std::size_t m,            \
                                        std::size_t k, std::size_t n, std::size_t ld);                      \
  void f32_narrow_linear_backward_data__##isa(const float* dy, const float* w, float* dx, std::size_t m,    \
                                              std::size_t k, std::size_t n, std::size_t ld);                \
  void f32_narrow_linear_backward_weights__##isa(const float* x, const float* dy, float* dw, std::size_t m, \
                                                 std::size_t k, std::size_t n, std::size_t ld);
CPUDL_DECLARE_NARROW(ref)
CPUDL_DECLARE_NARROW(avx2)
CPUDL_DECLARE_NARROW(avx512)
#undef CPUDL_DECLARE_NARROW

}  // namespace cpudl::kernels
