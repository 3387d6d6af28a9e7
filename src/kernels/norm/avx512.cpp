// AVX512 variants of the norm kernels (bodies shared in norm.inl).
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {
namespace {
using V = Avx512;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx512
#include "kernels/norm/norm.inl"
