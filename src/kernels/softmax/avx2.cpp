// AVX2 variants of softmax, log-softmax and cross-entropy (bodies in softmax.inl).
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {
using V = Avx2;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx2
#include "kernels/softmax/softmax.inl"
