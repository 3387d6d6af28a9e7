// f32 elementwise and reduction microkernels, one definition per ISA level. Each works on one
// contiguous range on the calling thread; ops split large tensors across the pool.
// Declarations only: ISA files must not share inline code with portable files (see dispatch.h).
#pragma once

#include <cstddef>

namespace cpudl::kernels {

#define CPUDL_DECLARE_ELTWISE(isa)                                                        \
  void f32_add__##isa(const float* a, const float* b, float* out, std::size_t n);          \
  void f32_mul__##isa(const float* a, const float* b, float* out, std::size_t n);          \
  void f32_relu__##isa(const float* x, float* out, std::size_t n);                         \
  float f32_sum__##isa(const float* x, std::size_t n);

CPUDL_DECLARE_ELTWISE(ref)
CPUDL_DECLARE_ELTWISE(avx2)
CPUDL_DECLARE_ELTWISE(avx512)
#undef CPUDL_DECLARE_ELTWISE

}  // namespace cpudl::kernels
