// AVX2 variants of the narrow linear kernels (bodies shared with AVX-512 in narrow.inl).
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {
using V = Avx2;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx2
#include "kernels/narrow/narrow.inl"
