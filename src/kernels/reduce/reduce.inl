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

// One compare per vector; most vectors of a detector's scores hold nothing above the threshold and
// cost only that, the others write their lanes' positions bit by bit.
std::size_t CPUDL_KERNEL(f32_indices_above)(const float* x, std::size_t n, float threshold,
                                            std::int32_t* out) {
  const V::F t = V::set1(threshold);
  std::size_t count = 0, i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    unsigned bits = V::mask_bits(V::greater(V::load(x + i), t));
    while (bits != 0) {
      out[count++] = static_cast<std::int32_t>(i + static_cast<std::size_t>(__builtin_ctz(bits)));
      bits &= bits - 1;
    }
  }
  for (; i < n; ++i)
    if (x[i] > threshold) out[count++] = static_cast<std::int32_t>(i);
  return count;
}

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
