// AVX-512 variants of the narrow linear kernels (bodies shared with AVX2 in narrow.inl): in the
// fused first layer (ops/planar_conv.cpp) their operands are in cache and the FMAs bind.
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {
namespace {
using V = Avx512;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx512
#include "kernels/narrow/narrow.inl"
