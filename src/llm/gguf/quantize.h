// Conversions between float rows and the GGUF weight types cpudl computes with (F32, F16, BF16,
// Q8_0, Q4_0, Q4_K, Q6_K): dequantising rows (embedding look-ups, tests, re-quantising) and
// quantising weights (`cpudl quantize`). Scalar code: these run once per model, not per token.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llm/gguf/ggml_types.h"

namespace cpudl::llm {

// Whether cpudl can compute with tensors of this type.
bool is_compute_type(GgmlType type);
// Bytes of one row of k values (k a multiple of the block size).
std::size_t row_bytes(GgmlType type, std::size_t k);

void dequantize_row(GgmlType type, const void* in, float* out, std::size_t k);
// Error for types it cannot write (I-quants, Q4_1, ...).
void quantize_row(GgmlType type, const float* in, void* out, std::size_t k);

}  // namespace cpudl::llm
