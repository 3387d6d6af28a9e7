// Portable 6x16 GEMM microkernel: the reference for the ISA variants.
#include "kernels/gemm/gemm.h"

namespace cpudl::kernels {

void f32_gemm_6x16__ref(std::int64_t k, const float* a, const float* b, float* c, std::int64_t ldc,
                        bool accumulate) {
  float acc[kGemmMr][kGemmNr] = {};
  for (std::int64_t p = 0; p < k; ++p)
    for (int i = 0; i < kGemmMr; ++i)
      for (int j = 0; j < kGemmNr; ++j) acc[i][j] += a[p * kGemmMr + i] * b[p * kGemmNr + j];
  for (int i = 0; i < kGemmMr; ++i)
    for (int j = 0; j < kGemmNr; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + acc[i][j];
}

}  // namespace cpudl::kernels
