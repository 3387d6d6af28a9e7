// Portable layer norm in double: the oracle.
#include <cmath>
#include <vector>

#include "kernels/norm/norm.h"

namespace cpudl::kernels {

void f32_layer_norm_forward__ref(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                 float* rstd, std::size_t rows, std::size_t cols, float epsilon) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double m = 0, v = 0;
    for (std::size_t j = 0; j < cols; ++j) m += xr[j];
    m /= static_cast<double>(cols);
    for (std::size_t j = 0; j < cols; ++j) v += (xr[j] - m) * (xr[j] - m);
    v /= static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(v + epsilon);
    for (std::size_t j = 0; j < cols; ++j)
      y[r * cols + j] =
          static_cast<float>((xr[j] - m) * rs * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0));
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(rs);
  }
}

void f32_layer_norm_backward__ref(const float* x, const float* dy, const float* gamma, const float* mean,
                                  const float* rstd, float* dx, float* dgamma, float* dbeta, std::size_t rows,
                                  std::size_t cols) {
  std::vector<double> xhat(cols), g(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    double sum_g = 0, sum_g_xhat = 0;
    for (std::size_t j = 0; j < cols; ++j) {
      xhat[j] = (x[r * cols + j] - static_cast<double>(mean[r])) * rstd[r];
      g[j] = static_cast<double>(dy[r * cols + j]) * (gamma ? gamma[j] : 1.0);
      sum_g += g[j];
      sum_g_xhat += g[j] * xhat[j];
    }
    const double n = static_cast<double>(cols);
    for (std::size_t j = 0; j < cols; ++j) {
      dx[r * cols + j] = static_cast<float>(rstd[r] * (g[j] - sum_g / n - xhat[j] * sum_g_xhat / n));
      if (dgamma) dgamma[j] += static_cast<float>(dy[r * cols + j] * xhat[j]);
      if (dbeta) dbeta[j] += dy[r * cols + j];
    }
  }
}

void f32_rms_norm__ref(const float* x, const float* weight, float* y, std::size_t rows, std::size_t cols,
                       float epsilon) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double ss = 0;
    for (std::size_t i = 0; i < cols; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(cols) + epsilon);
    for (std::size_t i = 0; i < cols; ++i) y[r * cols + i] = static_cast<float>(xr[i] * scale * weight[i]);
  }
}

}  // namespace cpudl::kernels
