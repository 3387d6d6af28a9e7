// Optimiser bodies over the SIMD traits V: each element is read and written once per step.
#include "kernels/optim/optim.h"
#include "kernels/simd/loops.inl"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {

void CPUDL_KERNEL(f32_sgd_step)(float* param, const float* grad, float* buf, std::size_t n,
                                const SgdParams& p) {
  const V::F lr = V::set1(p.lr), wd = V::set1(p.weight_decay), mom = V::set1(p.momentum),
             keep = V::set1(1.0f - p.dampening);
  const bool decay = p.weight_decay != 0.0f, momentum = p.momentum != 0.0f;
  for_vectors<V>(n, [&](std::size_t i, std::size_t lanes) {
    const V::F w = load_n<V>(param + i, lanes);
    V::F g = load_n<V>(grad + i, lanes);
    if (decay) g = V::fma(wd, w, g);
    if (momentum) {
      const V::F b = p.first_step ? g : V::fma(mom, load_n<V>(buf + i, lanes), V::mul(keep, g));
      store_n<V>(buf + i, b, lanes);
      g = p.nesterov ? V::fma(mom, b, g) : b;
    }
    store_n<V>(param + i, V::fnma(lr, g, w), lanes);
  });
}

void CPUDL_KERNEL(f32_adam_step)(float* param, const float* grad, float* m, float* v, std::size_t n,
                                 const AdamParams& p) {
  const double bias1 = 1.0 - __builtin_pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bias2_sqrt =
      __builtin_sqrt(1.0 - __builtin_pow(static_cast<double>(p.beta2), static_cast<double>(p.step)));
  const V::F step_size = V::set1(static_cast<float>(p.lr / bias1));
  const V::F inv_bias2 = V::set1(1.0f / static_cast<float>(bias2_sqrt));
  const V::F b1 = V::set1(p.beta1), b2 = V::set1(p.beta2), one_b1 = V::set1(1.0f - p.beta1),
             one_b2 = V::set1(1.0f - p.beta2), eps = V::set1(p.epsilon), wd = V::set1(p.weight_decay),
             shrink = V::set1(1.0f - p.lr * p.weight_decay);
  const bool coupled_decay = !p.decoupled && p.weight_decay != 0.0f;
  for_vectors<V>(n, [&](std::size_t i, std::size_t lanes) {
    V::F w = load_n<V>(param + i, lanes);
    V::F g = load_n<V>(grad + i, lanes);
    if (p.decoupled) w = V::mul(w, shrink);
    if (coupled_decay) g = V::fma(wd, w, g);
    const V::F mi = V::fma(one_b1, g, V::mul(load_n<V>(m + i, lanes), b1));
    const V::F vi = V::fma(V::mul(one_b2, g), g, V::mul(load_n<V>(v + i, lanes), b2));
    const V::F denom = V::fma(V::sqrt(vi), inv_bias2, eps);
    store_n<V>(m + i, mi, lanes);
    store_n<V>(v + i, vi, lanes);
    store_n<V>(param + i, V::fnma(step_size, V::div(mi, denom), w), lanes);
  });
}

}  // namespace cpudl::kernels
