// cpudl's weight-row product: one to eight rows of A times weights stored as rows of k (B^T, as
// every exported Linear layer keeps them), on the LLM's row kernels (kernels/quant). Such a
// product is bound by reading the weights, not by multiply-adds: the kernel reads one row of A's
// products as four concurrent streams (a few rows: four rows of A per pass over the weights) and
// the threads split the weight rows, each applying the epilogue to its share. oneDNN 2.6's matmul
// primitive read them at a third of the speed on one thread and gained nothing from a second
// (docs/ARCHITECTURE.md, "Matrix products").
#pragma once

#include <cstdint>

#include "dense/shapes.h"

namespace cpudl::dense {

// Whether the product is one the weight-row kernels take: batch 1, 1 to kWeightRowsMaxM rows of A,
// B transposed (stored as n rows of k), A not, nothing accumulated into C. Eight: at 16 rows
// oneDNN's primitive is faster again on one thread (the kernel passes over the weights once per
// four rows of A).
inline constexpr std::int64_t kWeightRowsMaxM = 8;
bool weight_rows_fit(const MatmulShape& s, const MatmulEpilogue& e);

// C = A B^T with f32 weights b[n][k].
void weight_rows_f32(const MatmulShape& s, const float* a, const float* b, float* c, const MatmulEpilogue& e);

// C = bf16(A) B^T with bfloat16 weights b[n][k] and f32 sums, as torch.autocast computes a Linear
// layer: A's values are rounded to bf16 first (into a per-thread buffer), so the products are
// exact in f32 and only the summation order differs from oneDNN's bf16 matmul.
void weight_rows_bf16(const MatmulShape& s, const float* a, const std::uint16_t* b, float* c,
                      const MatmulEpilogue& e);

}  // namespace cpudl::dense
