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
