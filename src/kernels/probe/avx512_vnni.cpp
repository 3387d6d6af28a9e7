// AVX512-VNNI int8 dot-product probe: VPDPBUSD does 64 u8 x s8 multiply-accumulates into 16 s32
// lanes in one instruction; 12 chains cover its latency on two ports.
#include <immintrin.h>

#include "kernels/probe/probe.h"

namespace cpudl::kernels {

std::uint64_t int8_dot_probe__avx512_vnni(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 12;
  __m512i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  __m512i total = _mm512_setzero_si512();
  for (int j = 0; j < kChains; ++j) total = _mm512_add_epi32(total, acc[j]);
  *sink = static_cast<float>(_mm512_reduce_add_epi32(total));
  return iterations * kChains * 64 * 2;
}

}  // namespace cpudl::kernels
