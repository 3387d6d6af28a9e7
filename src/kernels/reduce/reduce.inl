// Reduction bodies over the SIMD traits V; avx2.cpp / avx512.cpp define V and CPUDL_ISA.
#include "kernels/reduce/reduce.h"
#include "kernels/simd/loops.inl"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {

float CPUDL_KERNEL(f32_sum)(const float* x, std::size_t n) {
  return reduce_sum<V>(x, n, [](V::F v) { return v; });
}

float CPUDL_KERNEL(f32_max)(const float* x, std::size_t n) { return reduce_max<V>(x, n); }

// Two passes, each at load speed: the maximum, then the first position holding it.
std::size_t CPUDL_KERNEL(f32_argmax)(const float* x, std::size_t n) {
  if (n == 0) return 0;
  const float maximum = reduce_max<V>(x, n);
  const V::F target = V::set1(maximum);
  std::size_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    const V::M hit = V::equal(V::load(x + i), target);
    if (V::any(hit)) return i + static_cast<std::size_t>(V::first_set(hit));
  }
  for (; i < n; ++i)
    if (x[i] == maximum) return i;
  return 0;  // only reachable when every value is NaN
}

}  // namespace cpudl::kernels
