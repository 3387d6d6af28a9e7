// AVX2 FMA probe: 12 independent 8-lane FMA chains cover 2 FMA ports x 4-5 cycles of latency.
#include <immintrin.h>

#include "kernels/probe/probe.h"

namespace cpudl::kernels {

std::uint64_t f32_fma_probe__avx2(std::uint64_t iterations, float* sink) {
  constexpr int kAccumulators = 12;
  __m256 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 scale = _mm256_set1_ps(0.999999f), offset = _mm256_set1_ps(1e-6f);
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm256_fmadd_ps(acc[j], scale, offset);
  __m256 total = _mm256_setzero_ps();
  for (int j = 0; j < kAccumulators; ++j) total = _mm256_add_ps(total, acc[j]);
  float lanes[8];
  _mm256_storeu_ps(lanes, total);
  *sink = lanes[0] + lanes[7];
  return iterations * kAccumulators * 8 * 2;
}

}  // namespace cpudl::kernels

namespace cpudl::kernels {

// AVX2 has no int8 dot instruction: VPMADDUBSW (u8 x s8 pairs -> s16) then VPMADDWD against ones
// (-> s32) and an add: 32 multiply-accumulates per three instructions per chain.
std::uint64_t int8_dot_probe__avx2(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 8;
  __m256i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_setzero_si256();
  // The products must be recomputed every step: with loop-invariant operands the compiler hoists
  // them out of the loop and the probe times the additions alone. Each chain multiplies its own
  // vector, and the empty asm makes `b` opaque to the optimiser on every iteration.
  __m256i a[kChains];
  for (int j = 0; j < kChains; ++j) a[j] = _mm256_set1_epi8(static_cast<char>(3 + j));
  __m256i b = _mm256_set1_epi8(-2);
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    asm volatile("" : "+x"(b));
    for (int j = 0; j < kChains; ++j)
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a[j], b), ones));
  }
  __m256i total = _mm256_setzero_si256();
  for (int j = 0; j < kChains; ++j) total = _mm256_add_epi32(total, acc[j]);
  *sink = static_cast<float>(_mm256_extract_epi32(total, 0));
  return iterations * kChains * 32 * 2;
}

}  // namespace cpudl::kernels
