// AVX2 variants of the norm kernels (bodies shared in norm.inl).
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {
using V = Avx2;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx2
#include "kernels/norm/norm.inl"
