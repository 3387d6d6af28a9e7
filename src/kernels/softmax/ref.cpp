// Portable references for the softmax family, in double: the oracle.
#include <cmath>
#include <limits>

#include "kernels/softmax/softmax.h"

namespace cpudl::kernels {
namespace {
// log(sum(exp(x))) of one row, stably.
double log_sum_exp(const float* x, std::size_t cols) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(x[j]));
  double s = 0;
  for (std::size_t j = 0; j < cols; ++j) s += std::exp(x[j] - m);
  return m + std::log(s);
}
}  // namespace

void f32_softmax__ref(const float* x, float* y, std::size_t rows, std::size_t cols, std::size_t ld_in,
                      std::size_t ld_out) {
  for (std::size_t r = 0; r < rows; ++r) {
    const double lse = log_sum_exp(x + r * ld_in, cols);
    for (std::size_t j = 0; j < cols; ++j)
      y[r * ld_out + j] = static_cast<float>(std::exp(x[r * ld_in + j] - lse));
  }
}

void f32_log_softmax__ref(const float* x, float* y, std::size_t rows, std::size_t cols, std::size_t ld_in,
                          std::size_t ld_out) {
  for (std::size_t r = 0; r < rows; ++r) {
    const double lse = log_sum_exp(x + r * ld_in, cols);
    for (std::size_t j = 0; j < cols; ++j) y[r * ld_out + j] = static_cast<float>(x[r * ld_in + j] - lse);
  }
}

void f32_cross_entropy__ref(const CrossEntropyArgs& a) {
  const double eps = a.smoothing, uniform = eps / static_cast<double>(a.classes);
  for (std::size_t r = 0; r < a.rows; ++r) {
    const float* x = a.logits + r * a.ld_logits;
    const double lse = log_sum_exp(x, a.classes);
    const auto label = static_cast<std::size_t>(a.labels[r]);
    double loss = 0;
    for (std::size_t j = 0; j < a.classes; ++j) {
      const double target = uniform + (j == label ? 1.0 - eps : 0.0);
      loss -= target * (x[j] - lse);
      if (a.dlogits) a.dlogits[r * a.ld_grad + j] = static_cast<float>(std::exp(x[j] - lse) - target);
    }
    a.loss[r] = static_cast<float>(loss);
  }
}

}  // namespace cpudl::kernels
