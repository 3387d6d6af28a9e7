// Portable reference of the pointwise tile (pointwise.h).
#include <algorithm>

#include "kernels/pointwise/pointwise.h"

namespace cpudl::kernels {

void f32_pointwise_tile__ref(const PointwiseTileArgs& t) {
  constexpr int kCols = kPointwiseColumns;
  for (int i = 0; i < t.rows; ++i) {
    float acc[kCols];
    for (int j = 0; j < kCols; ++j) acc[j] = t.bias ? t.bias[j] : 0.0f;
    for (std::int64_t p = 0; p < t.k; ++p)
      for (int j = 0; j < kCols; ++j) acc[j] += t.a[i][p] * t.b[p * kCols + j];
    std::copy(acc, acc + kCols, t.c[i]);
    for (int d = 1; t.gaps && d <= t.gaps[i]; ++d) std::fill_n(t.c[i] + d * t.gap_stride, kCols, 0.0f);
  }
  if (t.zero_floats > 0) std::fill_n(t.zero, t.zero_floats, 0.0f);
}

}  // namespace cpudl::kernels
