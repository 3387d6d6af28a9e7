// GEMM sliver packing over the SIMD traits V (GemmPackFn, kernel_types.h): R rows of row-major
// A, lda apart, kc columns each, as sliver[p * R + i] = a[i * lda + p], rows past `rows` zero.
// W = V::kWidth steps at a time, each group of W rows is transposed in registers (V::transpose)
// and step p's R floats are stored as vectors; the last kc % W steps go one float at a time.
// avx2.cpp / avx512.cpp include it after their traits. Scalar packing took a tenth of the 14x32
// driver's time at 1024^3, and 40-75% more for a transposed B (gemm.h).
#include <algorithm>
#include <cstdint>

namespace cpudl::kernels {
namespace {

template <class V, int R>
void pack_sliver(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc, float* sliver) {
  constexpr int W = V::kWidth, kGroups = (R + W - 1) / W;
  std::int64_t p = 0;
  for (; p + W <= kc; p += W)
    for (int g = 0; g < kGroups; ++g) {
      typename V::F r[W];
      for (int i = 0; i < W; ++i) {
        const int row = g * W + i;
        r[i] = row < R && row < rows ? V::load(a + row * lda + p) : V::zero();
      }
      V::transpose(r);
      const int count = std::min(W, R - g * W);
      for (int q = 0; q < W; ++q) {
        float* dst = sliver + (p + q) * R + g * W;
        // A single group narrower than a vector (R < W) stores whole vectors but the last: each
        // spills into the next step's floats, which that step's store then overwrites.
        if (count == W || (kGroups == 1 && q + 1 < W))
          V::store(dst, r[q]);
        else
          V::store_partial(dst, r[q], static_cast<std::size_t>(count));
      }
    }
  for (; p < kc; ++p)
    for (std::int64_t i = 0; i < R; ++i) sliver[p * R + i] = i < rows ? a[i * lda + p] : 0.0f;
}

}  // namespace
}  // namespace cpudl::kernels
