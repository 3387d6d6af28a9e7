// Roofline probes: loops that run one resource (the FMA units) flat out, so the machine's real
// peak is measured rather than taken from a datasheet. Declarations only (see dispatch.h).
#pragma once

#include <cstdint>

namespace cpudl::kernels {

// Runs `iterations` rounds of independent multiply-adds, stores a value derived from every
// accumulator to *sink (so nothing is optimised away), and returns the floating-point
// operations performed.
#define CPUDL_DECLARE_PROBE(isa) std::uint64_t f32_fma_probe__##isa(std::uint64_t iterations, float* sink);
// The same for 8-bit integer dot products (u8 x s8 -> s32) and bf16 dot products (-> f32); an
// operation is a multiply or an add, so one multiply-accumulate counts 2.
#define CPUDL_DECLARE_INT8_PROBE(isa) \
  std::uint64_t int8_dot_probe__##isa(std::uint64_t iterations, float* sink);
#define CPUDL_DECLARE_BF16_PROBE(isa) \
  std::uint64_t bf16_dot_probe__##isa(std::uint64_t iterations, float* sink);

CPUDL_DECLARE_PROBE(ref)
CPUDL_DECLARE_PROBE(avx2)
CPUDL_DECLARE_PROBE(avx512)
CPUDL_DECLARE_INT8_PROBE(ref)
CPUDL_DECLARE_INT8_PROBE(avx2)
CPUDL_DECLARE_INT8_PROBE(avx512)
CPUDL_DECLARE_INT8_PROBE(avx512_vnni)
CPUDL_DECLARE_BF16_PROBE(ref)
CPUDL_DECLARE_BF16_PROBE(avx512_bf16)
#undef CPUDL_DECLARE_PROBE
#undef CPUDL_DECLARE_INT8_PROBE
#undef CPUDL_DECLARE_BF16_PROBE

}  // namespace cpudl::kernels
