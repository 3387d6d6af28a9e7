#include "llm/weight_matmul.h"

#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "llm/quantize.h"
#include "onednn/dense.h"
#include "runtime/parallel.h"

namespace cpudl::llm {

WeightKernel weight_kernel(GgmlType type) {
  const kernels::KernelTable& k = kernels::kernel_table();
  switch (type) {
    case GgmlType::f32: return {k.f32_f32_matmul.fn, nullptr, GgmlType::f32};
    case GgmlType::f16: return {k.f16_f32_matmul.fn, nullptr, GgmlType::f32};
    case GgmlType::bf16: return {k.bf16_f32_matmul.fn, nullptr, GgmlType::f32};
    case GgmlType::q8_0: return {k.q8_0_q8_0_matmul.fn, k.quantize_row_q8_0.fn, GgmlType::q8_0};
    case GgmlType::q4_0: return {k.q4_0_q8_0_matmul.fn, k.quantize_row_q8_0.fn, GgmlType::q8_0};
    case GgmlType::q4_k: return {k.q4_k_q8_k_matmul.fn, k.quantize_row_q8_k.fn, GgmlType::q8_k};
    case GgmlType::q6_k: return {k.q6_k_q8_k_matmul.fn, k.quantize_row_q8_k.fn, GgmlType::q8_k};
    default: throw Error("no kernel for tensor type " + std::string(ggml_type_info(static_cast<std::uint32_t>(type))->name));
  }
}

void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, std::vector<std::uint8_t>& scratch, int threads) {
  if (w.type == GgmlType::f32 && tokens >= 4 && ldx == w.cols && ldy == w.rows) {
    onednn::MatmulShape shape;
    shape.m = static_cast<std::int64_t>(tokens);
    shape.n = static_cast<std::int64_t>(w.rows);
    shape.k = static_cast<std::int64_t>(w.cols);
    shape.transpose_b = true;
    onednn::matmul_onednn(shape, x, reinterpret_cast<const float*>(w.data), y);
    return;
  }
  const WeightKernel kernel = weight_kernel(w.type);
  const void* act = x;
  std::size_t act_row_bytes = ldx * sizeof(float);
  if (kernel.quantize != nullptr) {
    act_row_bytes = row_bytes(kernel.activation, w.cols);
    if (scratch.size() < tokens * act_row_bytes) scratch.resize(tokens * act_row_bytes);
    for (std::size_t t = 0; t < tokens; ++t) kernel.quantize(x + t * ldx, scratch.data() + t * act_row_bytes, w.cols);
    act = scratch.data();
  }
  // Chunks of at least 16 rows: each thread streams its own contiguous slice of the weights.
  parallel_for(w.rows, 16, threads, [&](std::size_t begin, std::size_t end) {
    kernel.matmul({w.data + begin * w.row_bytes, w.row_bytes, act, act_row_bytes, y + begin, ldy, end - begin, tokens, w.cols});
  });
}

}  // namespace cpudl::llm
