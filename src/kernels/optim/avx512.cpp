// AVX512 variants of the optim kernels (bodies shared in optim.inl).
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {
namespace {
using V = Avx512;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx512
#include "kernels/optim/optim.inl"
