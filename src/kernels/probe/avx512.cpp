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

namespace cpudl::kernels {

// AVX-512BW without VNNI: VPMADDUBSW + VPMADDWD + VPADDD, 64 multiply-accumulates per chain step.
std::uint64_t int8_dot_probe__avx512(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 8;
  __m512i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_setzero_si512();
  // The products must be recomputed every step: with loop-invariant operands the compiler hoists
  // them out of the loop and the probe times the additions alone. Each chain multiplies its own
  // vector, and the empty asm makes `b` opaque to the optimiser on every iteration.
  __m512i a[kChains];
  for (int j = 0; j < kChains; ++j) a[j] = _mm512_set1_epi8(static_cast<char>(3 + j));
  __m512i b = _mm512_set1_epi8(-2);
  const __m512i ones = _mm512_set1_epi16(1);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    asm volatile("" : "+v"(b));
    for (int j = 0; j < kChains; ++j)
      acc[j] = _mm512_add_epi32(acc[j], _mm512_madd_epi16(_mm512_maddubs_epi16(a[j], b), ones));
  }
  __m512i total = _mm512_setzero_si512();
  for (int j = 0; j < kChains; ++j) total = _mm512_add_epi32(total, acc[j]);
  *sink = static_cast<float>(_mm512_reduce_add_epi32(total));
  return iterations * kChains * 64 * 2;
}

}  // namespace cpudl::kernels
