// AVX512 variants of the reductions (bodies shared in reduce.inl).
#include "kernels/simd/avx512.inl"

namespace cpudl::kernels {
namespace {
using V = Avx512;
}
}  // namespace cpudl::kernels
#define CPUDL_ISA avx512
#include "kernels/reduce/reduce.inl"
