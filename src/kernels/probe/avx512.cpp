// AVX-512 FMA probe: 16 independent 16-lane chains (2 FMA ports x 4 cycles, with headroom).
#include <immintrin.h>

#include "kernels/probe/probe.h"

namespace cpudl::kernels {

std::uint64_t f32_fma_probe__avx512(std::uint64_t iterations, float* sink) {
  constexpr int kAccumulators = 16;
  __m512 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 scale = _mm512_set1_ps(0.999999f), offset = _mm512_set1_ps(1e-6f);
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_fmadd_ps(acc[j], scale, offset);
  __m512 total = _mm512_setzero_ps();
  for (int j = 0; j < kAccumulators; ++j) total = _mm512_add_ps(total, acc[j]);
  *sink = _mm512_reduce_add_ps(total);
  return iterations * kAccumulators * 16 * 2;
}

}  // namespace cpudl::kernels
