// Layout kernels: the 2-D transpose behind row-major <-> channels-last conversions (an NCHW
// image is a C x HW matrix, its NHWC form the HW x C transpose). Memory-bound; the AVX2 variant
// moves 8 x 8 tiles through registers instead of one strided float at a time.
#pragma once

#include <cstddef>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_LAYOUT(isa)                                                                     \
  void f32_transpose__##isa(const float* src, std::size_t rows, std::size_t cols, std::size_t ld_src, \
                            float* dst, std::size_t ld_dst);
CPUDL_DECLARE_LAYOUT(ref)
CPUDL_DECLARE_LAYOUT(avx2)
#undef CPUDL_DECLARE_LAYOUT

}  // namespace cpudl::kernels
