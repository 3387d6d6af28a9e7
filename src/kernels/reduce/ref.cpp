// Portable reductions: the oracle. The sum accumulates in double, to judge float sums.
#include <algorithm>
#include <limits>

#include "kernels/reduce/reduce.h"

namespace cpudl::kernels {

float f32_sum__ref(const float* x, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += x[i];
  return static_cast<float>(sum);
}

float f32_max__ref(const float* x, std::size_t n) {
  float best = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

// out receives i for every x[i] > threshold (NaN never), in order; returns how many.
std::size_t f32_indices_above__ref(const float* x, std::size_t n, float threshold, std::int32_t* out) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (x[i] > threshold) out[count++] = static_cast<std::int32_t>(i);
  return count;
}

bool box_overlaps_any__ref(const BoxColumns& b, std::size_t n, const float* q, float threshold) {
  for (std::size_t k = 0; k < n; ++k) {
    const float w = std::min(b.x2[k], q[2]) - std::max(b.x1[k], q[0]);
    const float h = std::min(b.y2[k], q[3]) - std::max(b.y1[k], q[1]);
    const float intersection = w * h, union_area = b.area[k] + q[4] - intersection;
    if (w > 0 && h > 0 && b.area[k] > 0 && union_area > 0 && intersection / union_area > threshold)
      return true;
  }
  return false;
}

std::size_t f32_argmax__ref(const float* x, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace cpudl::kernels
