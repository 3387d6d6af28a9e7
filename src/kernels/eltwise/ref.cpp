// Portable scalar references: the oracle every ISA variant is tested against. Transcendentals
// are evaluated in double and rounded once.
#include <cmath>

#include "kernels/eltwise/eltwise.h"

namespace cpudl::kernels {

namespace {
template <class Op>
void map(const float* x, float* out, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(op(static_cast<double>(x[i])));
}
template <class Op>
void map2(const float* a, const float* b, float* out, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}
// x Phi(x), whose limit at -inf is 0 (the product form would give -inf * 0 = NaN there).
double gelu(double x) { return std::isinf(x) && x < 0 ? 0.0 : 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// Phi(x) + x phi(x), whose limits at -inf and +inf are 0 and 1 (x phi(x) would be inf * 0).
double gelu_derivative(double x) {
  if (std::isinf(x)) return x < 0 ? 0.0 : 1.0;
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}
}  // namespace

void f32_add__ref(const float* a, const float* b, float* out, std::size_t n) {
  map2(a, b, out, n, [](float x, float y) { return x + y; });
}
void f32_sub__ref(const float* a, const float* b, float* out, std::size_t n) {
  map2(a, b, out, n, [](float x, float y) { return x - y; });
}
void f32_mul__ref(const float* a, const float* b, float* out, std::size_t n) {
  map2(a, b, out, n, [](float x, float y) { return x * y; });
}
void f32_div__ref(const float* a, const float* b, float* out, std::size_t n) {
  map2(a, b, out, n, [](float x, float y) { return x / y; });
}

// relu(a + b), the sum rounded to float first as the two-op form would.
void f32_add_relu__ref(const float* a, const float* b, float* out, std::size_t n) {
  map2(a, b, out, n, [](float x, float y) {
    const float sum = x + y;
    return 0.0f > sum ? 0.0f : sum;
  });
}

// max(0, x) with x propagated when it is NaN, as MAXPS(0, x) and PyTorch's relu do.
void f32_relu__ref(const float* x, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = 0.0f > x[i] ? 0.0f : x[i];
}
void f32_gelu__ref(const float* x, float* out, std::size_t n) { map(x, out, n, gelu); }
void f32_sigmoid__ref(const float* x, float* out, std::size_t n) {
  map(x, out, n, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}
void f32_tanh__ref(const float* x, float* out, std::size_t n) {
  map(x, out, n, [](double v) { return std::tanh(v); });
}
void f32_exp__ref(const float* x, float* out, std::size_t n) {
  map(x, out, n, [](double v) { return std::exp(v); });
}
void f32_log__ref(const float* x, float* out, std::size_t n) {
  map(x, out, n, [](double v) { return std::log(v); });
}

void f32_swiglu__ref(const float* gate, const float* up, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

// PyTorch's threshold_backward: the gradient passes where x > 0.
void f32_relu_backward__ref(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}
void f32_gelu_backward__ref(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = static_cast<float>(dy[i] * gelu_derivative(x[i]));
}
void f32_sigmoid_backward__ref(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}
void f32_tanh_backward__ref(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

}  // namespace cpudl::kernels
