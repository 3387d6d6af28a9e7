// Portable multiply-add probe: SSE2 (baseline x86-64) has no FMA, so a multiply and an add.
#include "kernels/probe/probe.h"

namespace cpudl::kernels {

std::uint64_t f32_fma_probe__ref(std::uint64_t iterations, float* sink) {
  using v4 = float __attribute__((vector_size(16)));
  constexpr int kAccumulators = 12;  // enough independent chains to cover add latency x ports
  v4 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = v4{} + static_cast<float>(j);
  const v4 scale = v4{} + 0.999999f, offset = v4{} + 1e-6f;
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kAccumulators; ++j) acc[j] = acc[j] * scale + offset;
  v4 total = v4{};
  for (int j = 0; j < kAccumulators; ++j) total += acc[j];
  *sink = total[0] + total[1] + total[2] + total[3];
  return iterations * kAccumulators * 4 * 2;
}

}  // namespace cpudl::kernels

namespace cpudl::kernels {

// Scalar u8 x s8 multiply-accumulate chains: the reference, and what a CPU without SIMD int8
// dot products does.
std::uint64_t int8_dot_probe__ref(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 16;
  std::int32_t acc[kChains] = {};
  std::uint8_t a[kChains];
  std::int8_t b[kChains];
  for (int j = 0; j < kChains; ++j)
    a[j] = static_cast<std::uint8_t>(j + 1), b[j] = static_cast<std::int8_t>(j - 8);
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] += static_cast<std::int32_t>(a[j]) * b[j];
  std::int64_t total = 0;
  for (int j = 0; j < kChains; ++j) total += acc[j];
  *sink = static_cast<float>(total);
  return iterations * kChains * 2;
}

// bf16 has no portable arithmetic: products of bf16 values widened to f32, as the reference.
std::uint64_t bf16_dot_probe__ref(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 16;
  float acc[kChains] = {};
  for (std::uint64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * 0.5f + 1.0f;  // bf16-exact operands
  float total = 0;
  for (int j = 0; j < kChains; ++j) total += acc[j];
  *sink = total;
  return iterations * kChains * 2;
}

}  // namespace cpudl::kernels
