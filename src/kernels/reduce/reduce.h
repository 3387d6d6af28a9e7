// f32 reductions over one contiguous range: sum, max, argmax, the positions above a threshold
// (a detector's score filter: NMS reads 25,200 x 80 scores per image and keeps a few hundred), and
// whether a box overlaps any of a set (NMS's greedy test, against every box kept so far).
// ref.cpp is the oracle; the SIMD bodies live in reduce.inl, compiled by avx2.cpp and avx512.cpp.
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_REDUCE(isa)                                                                          \
  float f32_sum__##isa(const float* x, std::size_t n);                                                     \
  float f32_max__##isa(const float* x, std::size_t n);                                                     \
  std::size_t f32_argmax__##isa(const float* x, std::size_t n);                                            \
  std::size_t f32_indices_above__##isa(const float* x, std::size_t n, float threshold, std::int32_t* out); \
  bool box_overlaps_any__##isa(const BoxColumns& boxes, std::size_t n, const float* query, float threshold);

CPUDL_DECLARE_REDUCE(ref)
CPUDL_DECLARE_REDUCE(avx2)
CPUDL_DECLARE_REDUCE(avx512)
#undef CPUDL_DECLARE_REDUCE

}  // namespace cpudl::kernels
