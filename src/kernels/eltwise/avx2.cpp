// AVX2 variants of the elementwise kernels (bodies shared with AVX-512 in eltwise.inl).
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {
using V = Avx2;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx2
#include "kernels/eltwise/eltwise.inl"
