// AVX512-BF16 dot-product probe: VDPBF16PS multiplies 32 bf16 pairs and accumulates them into 16
// f32 lanes; 12 chains cover its latency on two ports.
#include <immintrin.h>

#include "kernels/probe/probe.h"

namespace cpudl::kernels {

std::uint64_t bf16_dot_probe__avx512_bf16(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_setzero_ps();
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(-0.125f), _mm512_set1_ps(2.0f));
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  __m512 total = _mm512_setzero_ps();
  for (int j = 0; j < kChains; ++j) total = _mm512_add_ps(total, acc[j]);
  *sink = _mm512_reduce_add_ps(total);
  return iterations * kChains * 32 * 2;
}

}  // namespace cpudl::kernels
