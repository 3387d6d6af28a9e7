// f32 reductions over one contiguous range: sum, max, argmax, and the positions above a threshold
// (a detector's score filter: NMS reads 25,200 x 80 scores per image and keeps a few hundred).
// ref.cpp is the oracle; the SIMD bodies live in reduce.inl, compiled by avx2.cpp and avx512.cpp.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_REDUCE(isa)                               \
  float f32_sum__##isa(const float* x, std::size_t n);          \
  float f32_max__##isa(const float* x, std::size_t n);          \
  std::size_t f32_argmax__##isa(const float* x, std::size_t n); \
  std::size_t f32_indices_above__##isa(const float* x, std::size_t n, float threshold, std::int32_t* out);

CPUDL_DECLARE_REDUCE(ref)
CPUDL_DECLARE_REDUCE(avx2)
CPUDL_DECLARE_REDUCE(avx512)
#undef CPUDL_DECLARE_REDUCE

}  // namespace cpudl::kernels
