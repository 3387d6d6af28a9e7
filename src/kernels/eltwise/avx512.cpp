// AVX-512 variants of the elementwise kernels (bodies shared with AVX2 in eltwise.inl).
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {
namespace {
using V = Avx512;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx512
#include "kernels/eltwise/eltwise.inl"
