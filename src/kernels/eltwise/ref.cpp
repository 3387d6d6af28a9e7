// Portable scalar references: the oracle that every ISA variant is tested against.
#include "kernels/eltwise/eltwise.h"

namespace cpudl::kernels {

void f32_add__ref(const float* a, const float* b, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void f32_mul__ref(const float* a, const float* b, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

// max(0, x) with x propagated when it is NaN, as MAXPS(0, x) and PyTorch's relu do.
void f32_relu__ref(const float* x, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = 0.0f > x[i] ? 0.0f : x[i];
}

// Accumulates in double: the reference must be more accurate than what it judges.
float f32_sum__ref(const float* x, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += x[i];
  return static_cast<float>(sum);
}

}  // namespace cpudl::kernels
