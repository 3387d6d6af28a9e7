// AVX2 variants of the reductions (bodies shared in reduce.inl).
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {
using V = Avx2;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx2
#include "kernels/reduce/reduce.inl"
