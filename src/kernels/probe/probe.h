// Roofline probes: loops that run one resource (the FMA units) flat out, so the machine's real
// peak is measured rather than taken from a datasheet. Declarations only (see dispatch.h).
#pragma once

#include <cstdint>

namespace cpudl::kernels {

// Runs `iterations` rounds of independent multiply-adds, stores a value derived from every
// accumulator to *sink (so nothing is optimised away), and returns the floating-point
// operations performed.
#define CPUDL_DECLARE_PROBE(isa) std::uint64_t f32_fma_probe__##isa(std::uint64_t iterations, float* sink);

CPUDL_DECLARE_PROBE(ref)
CPUDL_DECLARE_PROBE(avx2)
CPUDL_DECLARE_PROBE(avx512)
#undef CPUDL_DECLARE_PROBE

}  // namespace cpudl::kernels
