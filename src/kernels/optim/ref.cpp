// Portable optimiser updates, operation by operation as PyTorch 1.13's single-tensor code.
#include <cmath>

#include "kernels/optim/optim.h"

namespace cpudl::kernels {

void f32_sgd_step__ref(float* param, const float* grad, float* buf, std::size_t n, const SgdParams& p) {
  for (std::size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (p.weight_decay != 0.0f) g += p.weight_decay * param[i];
    if (p.momentum != 0.0f) {
      buf[i] = p.first_step ? g : p.momentum * buf[i] + (1.0f - p.dampening) * g;
      g = p.nesterov ? g + p.momentum * buf[i] : buf[i];
    }
    param[i] -= p.lr * g;
  }
}

void f32_adam_step__ref(float* param, const float* grad, float* m, float* v, std::size_t n,
                        const AdamParams& p) {
  const double bias1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bias2_sqrt =
      std::sqrt(1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step)));
  const float step_size = static_cast<float>(p.lr / bias1);
  for (std::size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (p.decoupled)
      param[i] *= 1.0f - p.lr * p.weight_decay;
    else if (p.weight_decay != 0.0f)
      g += p.weight_decay * param[i];
    m[i] = m[i] * p.beta1 + (1.0f - p.beta1) * g;
    v[i] = v[i] * p.beta2 + (1.0f - p.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / static_cast<float>(bias2_sqrt) + p.epsilon;
    param[i] -= step_size * (m[i] / denom);
  }
}

}  // namespace cpudl::kernels
