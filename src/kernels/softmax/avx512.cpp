// AVX512 variants of softmax, log-softmax and cross-entropy (bodies in softmax.inl).
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {
namespace {
using V = Avx512;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx512
#include "kernels/softmax/softmax.inl"
