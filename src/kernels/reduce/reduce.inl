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

// Four vectors of boxes between exits: a candidate NMS suppresses mostly overlaps one of the
// first (best) boxes kept, and a kept one must be tested against all. Tail lanes load as zeros:
// area 0, never an overlap.
bool CPUDL_KERNEL(box_overlaps_any)(const BoxColumns& b, std::size_t n, const float* q, float threshold) {
  const V::F qx1 = V::set1(q[0]), qy1 = V::set1(q[1]), qx2 = V::set1(q[2]), qy2 = V::set1(q[3]),
             qarea = V::set1(q[4]), t = V::set1(threshold), zero = V::zero();
  auto hits = [&](V::F x1, V::F y1, V::F x2, V::F y2, V::F area) {
    const V::F w = V::sub(V::min(x2, qx2), V::max(x1, qx1)), h = V::sub(V::min(y2, qy2), V::max(y1, qy1));
    const V::F intersection = V::mul(w, h), union_area = V::sub(V::add(area, qarea), intersection);
    const V::M positive = V::mask_and(V::mask_and(V::greater(w, zero), V::greater(h, zero)),
                                      V::mask_and(V::greater(area, zero), V::greater(union_area, zero)));
    return V::mask_and(positive, V::greater(V::div(intersection, union_area), t));
  };
  constexpr std::size_t kStep = 4 * V::kWidth;
  std::size_t k = 0;
  for (; k + kStep <= n; k += kStep) {
    V::M any =
        hits(V::load(b.x1 + k), V::load(b.y1 + k), V::load(b.x2 + k), V::load(b.y2 + k), V::load(b.area + k));
    for (std::size_t j = k + V::kWidth; j < k + kStep; j += V::kWidth)
      any = V::mask_or(any, hits(V::load(b.x1 + j), V::load(b.y1 + j), V::load(b.x2 + j), V::load(b.y2 + j),
                                 V::load(b.area + j)));
    if (V::any(any)) return true;
  }
  for (; k < n; k += V::kWidth) {
    const std::size_t m = std::min<std::size_t>(V::kWidth, n - k);
    if (V::any(hits(V::load_partial(b.x1 + k, m), V::load_partial(b.y1 + k, m), V::load_partial(b.x2 + k, m),
                    V::load_partial(b.y2 + k, m), V::load_partial(b.area + k, m))))
      return true;
  }
  return false;
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
