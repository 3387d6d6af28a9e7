// Elementwise kernel bodies, written once over the SIMD traits V and compiled per ISA by
// avx2.cpp / avx512.cpp, which define V and CPUDL_ISA before including this file.
#include "kernels/eltwise/eltwise.h"
#include "kernels/simd/loops.inl"
#include "kernels/simd/math.inl"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {

using F = V::F;
using Math = VectorMath<V>;  // called through lambdas below: a function pointer would not inline

void CPUDL_KERNEL(f32_add)(const float* a, const float* b, float* out, std::size_t n) {
  map_binary<V>(a, b, out, n, [](F x, F y) { return V::add(x, y); });
}
void CPUDL_KERNEL(f32_sub)(const float* a, const float* b, float* out, std::size_t n) {
  map_binary<V>(a, b, out, n, [](F x, F y) { return V::sub(x, y); });
}
void CPUDL_KERNEL(f32_mul)(const float* a, const float* b, float* out, std::size_t n) {
  map_binary<V>(a, b, out, n, [](F x, F y) { return V::mul(x, y); });
}
void CPUDL_KERNEL(f32_div)(const float* a, const float* b, float* out, std::size_t n) {
  map_binary<V>(a, b, out, n, [](F x, F y) { return V::div(x, y); });
}

// max(0, x) keeps NaN: the max instruction returns its second operand when either is NaN.
void CPUDL_KERNEL(f32_relu)(const float* x, float* out, std::size_t n) {
  map_unary<V>(x, out, n, [](F v) { return V::max(V::zero(), v); });
}
void CPUDL_KERNEL(f32_gelu)(const float* x, float* out, std::size_t n) {
  map_unary<V>(x, out, n, [](F v) { return Math::gelu(v); });
}
void CPUDL_KERNEL(f32_sigmoid)(const float* x, float* out, std::size_t n) {
  map_unary<V>(x, out, n, [](F v) { return Math::sigmoid(v); });
}
void CPUDL_KERNEL(f32_tanh)(const float* x, float* out, std::size_t n) {
  map_unary<V>(x, out, n, [](F v) { return Math::tanh(v); });
}
void CPUDL_KERNEL(f32_exp)(const float* x, float* out, std::size_t n) {
  map_unary<V>(x, out, n, [](F v) { return Math::exp(v); });
}
void CPUDL_KERNEL(f32_log)(const float* x, float* out, std::size_t n) {
  map_unary<V>(x, out, n, [](F v) { return Math::log(v); });
}

// SwiGLU's gating (Llama's feed-forward): silu(gate) * up = gate * sigmoid(gate) * up.
void CPUDL_KERNEL(f32_swiglu)(const float* gate, const float* up, float* out, std::size_t n) {
  map_binary<V>(gate, up, out, n, [](F g, F u) { return V::mul(V::mul(g, Math::sigmoid(g)), u); });
}

// max(0, a + b): a residual join and its ReLU in one pass (NaN kept, as f32_relu).
void CPUDL_KERNEL(f32_add_relu)(const float* a, const float* b, float* out, std::size_t n) {
  map_binary<V>(a, b, out, n, [](F x, F y) { return V::max(V::zero(), V::add(x, y)); });
}

void CPUDL_KERNEL(f32_relu_backward)(const float* x, const float* dy, float* dx, std::size_t n) {
  map_binary<V>(x, dy, dx, n, [](F xv, F g) { return V::select(V::greater(xv, V::zero()), g, V::zero()); });
}
void CPUDL_KERNEL(f32_gelu_backward)(const float* x, const float* dy, float* dx, std::size_t n) {
  map_binary<V>(x, dy, dx, n, [](F xv, F g) { return V::mul(g, Math::gelu_derivative(xv)); });
}
void CPUDL_KERNEL(f32_sigmoid_backward)(const float* y, const float* dy, float* dx, std::size_t n) {
  map_binary<V>(y, dy, dx, n, [](F yv, F g) { return V::mul(V::mul(g, yv), V::sub(V::set1(1.0f), yv)); });
}
void CPUDL_KERNEL(f32_tanh_backward)(const float* y, const float* dy, float* dx, std::size_t n) {
  map_binary<V>(y, dy, dx, n, [](F yv, F g) { return V::mul(g, V::fnma(yv, yv, V::set1(1.0f))); });
}

}  // namespace cpudl::kernels
