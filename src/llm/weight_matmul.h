// y = x W^T for a weight matrix in any compute type, over the thread pool.
// - A few tokens (generation): the weight kernels, rows of W split across threads, activations
//   quantised once (Q8_0 or Q8_K) for the integer kernels; memory-bound, the weights read once.
// - A prompt (kGemmMinTokens tokens or more): compute-bound. W is dequantised to f32 in panels
//   (in place for F32) and multiplied by oneDNN's SGEMM, near the FMA roof: on AVX2 an int8
//   maddubs product needs as many instructions per multiply-add as an f32 FMA once its int32
//   widening and per-block scaling are counted, so the integer path has no edge to keep.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernel_types.h"
#include "llm/model_impl.h"

namespace cpudl::llm {

// Buffers a matmul reuses from call to call: quantised activations, dequantised weight panels.
struct MatmulScratch {
  std::vector<std::uint8_t> activations;
  std::vector<float> panel, out;
};

// y[t * ldy + r] = sum_c W[r][c] x[t * ldx + c] for t < tokens, r < W.rows.
void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, MatmulScratch& scratch, int threads);

// Several matrices of the same input width applied to the same x (Q, K and V; gate and up) in
// one pass: one fork/join for all their rows in generation, one wider SGEMM in a prompt.
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;
  std::size_t ldy;
};
void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, int threads);

// The activation format a weight type's kernel takes, and its kernel.
constexpr std::size_t kGemmMinTokens = 8;

// Activations as the weight kernels take them: f32 rows, or int8 blocks (BlockQ8A per 32 for
// Q8_0/Q4_0 weights, BlockQ8_K per 256 for the K-quants).
enum class ActivationFormat { f32, q8a, q8k };
std::size_t activation_row_bytes(ActivationFormat format, std::size_t k);

struct WeightKernel {
  kernels::WeightMatmulFn matmul;
  kernels::QuantizeRowFn quantize;  // null: the kernel takes f32 rows
  ActivationFormat activation;
};
WeightKernel weight_kernel(GgmlType type);

}  // namespace cpudl::llm
