// Portable references of the narrow linear kernels (narrow.h).
#include "kernels/narrow/narrow.h"

namespace cpudl::kernels {

void f32_narrow_linear_forward__ref(const float* x, const float* w, float* y, std::size_t m, std::size_t k,
                                    std::size_t n, std::size_t ld) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::size_t p = 0; p < k; ++p) acc += x[i * ld + p] * w[j * ld + p];
      y[i * n + j] = acc;
    }
}

void f32_narrow_linear_backward_data__ref(const float* dy, const float* w, float* dx, std::size_t m,
                                          std::size_t k, std::size_t n, std::size_t ld) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) {
      float acc = 0.0f;
      for (std::size_t j = 0; j < n; ++j) acc += dy[i * n + j] * w[j * ld + p];
      dx[i * ld + p] = acc;
    }
}

void f32_narrow_linear_backward_weights__ref(const float* x, const float* dy, float* dw, std::size_t m,
                                             std::size_t k, std::size_t n, std::size_t ld) {
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t p = 0; p < k; ++p) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < m; ++i) acc += dy[i * n + j] * x[i * ld + p];
      dw[j * ld + p] += acc;
    }
}

}  // namespace cpudl::kernels
