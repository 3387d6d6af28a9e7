// y = x W^T for a weight matrix in any compute type, over the thread pool: rows of W split
// across threads; activations quantised once (Q8_0 or Q8_K) for the integer kernels; F32 prompts
// (several tokens) go to oneDNN's SGEMM, which runs near the FMA roof.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_types.h"
#include "llm/model_impl.h"

namespace cpudl::llm {

// y[t * ldy + r] = sum_c W[r][c] x[t * ldx + c] for t < tokens, r < W.rows.
void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, std::vector<std::uint8_t>& scratch, int threads);

// The activation format a weight type's kernel takes, and its kernel.
struct WeightKernel {
  kernels::WeightMatmulFn matmul;
  kernels::QuantizeRowFn quantize;  // null: the kernel takes f32 rows
  GgmlType activation;              // f32, q8_0 or q8_k
};
WeightKernel weight_kernel(GgmlType type);

}  // namespace cpudl::llm
