// Portable reference of the layout kernels (layout.h).
#include "kernels/layout/layout.h"

namespace cpudl::kernels {

void f32_transpose__ref(const float* src, std::size_t rows, std::size_t cols, std::size_t ld_src, float* dst,
                        std::size_t ld_dst) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
}

}  // namespace cpudl::kernels
