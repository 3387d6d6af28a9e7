#include "llm/weight_matmul.h"

#include <algorithm>

#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "llm/quantize.h"
#include "runtime/parallel.h"

namespace cpudl::llm {

std::size_t activation_row_bytes(ActivationFormat format, std::size_t k) {
  switch (format) {
    case ActivationFormat::f32: return k * sizeof(float);
    case ActivationFormat::q8a: return k / 32 * sizeof(BlockQ8A);
    case ActivationFormat::q8k: return k / 256 * sizeof(BlockQ8_K);
  }
  return 0;
}

WeightKernel weight_kernel(GgmlType type) {
  const kernels::KernelTable& k = kernels::kernel_table();
  switch (type) {
    case GgmlType::f32: return {k.f32_f32_matmul.fn, nullptr, ActivationFormat::f32};
    case GgmlType::f16: return {k.f16_f32_matmul.fn, nullptr, ActivationFormat::f32};
    case GgmlType::bf16: return {k.bf16_f32_matmul.fn, nullptr, ActivationFormat::f32};
    case GgmlType::q8_0: return {k.q8_0_q8a_matmul.fn, k.quantize_row_q8a.fn, ActivationFormat::q8a};
    case GgmlType::q4_0: return {k.q4_0_q8a_matmul.fn, k.quantize_row_q8a.fn, ActivationFormat::q8a};
    case GgmlType::q4_k: return {k.q4_k_q8_k_matmul.fn, k.quantize_row_q8_k.fn, ActivationFormat::q8k};
    case GgmlType::q6_k: return {k.q6_k_q8_k_matmul.fn, k.quantize_row_q8_k.fn, ActivationFormat::q8k};
    default: throw Error("no kernel for tensor type " + std::string(ggml_type_info(static_cast<std::uint32_t>(type))->name));
  }
}

namespace {

// Prompt path: each thread takes a slice of the rows and walks it a panel of 12 rows at a time,
// multiplying each panel by all tokens of a chunk (whose activations fit in L2) with the
// register-blocked float kernels while the panel is in cache.
void dequantized_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                        int threads) {
  const std::size_t cols = targets[0].w->cols;
  std::size_t total_rows = 0;
  for (const MatmulTarget& t : targets) total_rows += t.w->rows;
  // Panels of 6, 12 and 48 rows measured the same here (within the host's noise).
  const std::size_t panel_rows = 12;
  const std::size_t token_chunk = std::max<std::size_t>(4, (std::size_t{256} << 10) / (cols * sizeof(float)) / 4 * 4);
  const kernels::WeightMatmulFn f32_kernel = kernels::kernel_table().f32_f32_matmul.fn;
  parallel_for(total_rows, 16, threads, [&](std::size_t begin, std::size_t end) {
    thread_local std::vector<float> panel;
    panel.resize(panel_rows * cols);
    for (std::size_t t0 = 0; t0 < tokens; t0 += token_chunk) {
      const std::size_t nt = std::min(token_chunk, tokens - t0);
      std::size_t base = 0;
      for (const MatmulTarget& target : targets) {
        const WeightMatrix& w = *target.w;
        const std::size_t lo = std::max(begin, base), hi = std::min(end, base + w.rows);
        // F32, F16 and BF16 rows feed the kernel as stored (it converts 16-bit values in
        // registers); the others are converted into the panel first. Either way a panel of rows
        // serves every token of the chunk while it is in cache.
        const bool direct = w.type == GgmlType::f32 || w.type == GgmlType::f16 || w.type == GgmlType::bf16;
        const kernels::WeightMatmulFn kernel = direct ? weight_kernel(w.type).matmul : f32_kernel;
        for (std::size_t r = lo; r < hi; r += panel_rows) {
          const std::size_t n = std::min(panel_rows, hi - r);
          const void* rows = w.data + (r - base) * w.row_bytes;
          std::size_t row_stride = w.row_bytes;
          if (!direct) {
            for (std::size_t j = 0; j < n; ++j)
              dequantize_row(w.type, w.data + (r - base + j) * w.row_bytes, panel.data() + j * cols, cols);
            rows = panel.data();
            row_stride = cols * sizeof(float);
          }
          kernel({rows, row_stride, x + t0 * ldx, ldx * sizeof(float), target.y + t0 * target.ldy + (r - base),
                  target.ldy, n, nt, cols});
        }
        base += w.rows;
      }
    }
  });
}

}  // namespace

void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, int threads) {
  if (targets.empty()) return;
  const std::size_t cols = targets[0].w->cols;
  for (const MatmulTarget& t : targets)
    if (t.w->cols != cols) throw Error("weight_matmul: '" + t.w->name + "' does not take inputs of " + std::to_string(cols));
  if (tokens >= kPromptMinTokens && ldx == cols) {
    dequantized_matmul(targets, x, tokens, ldx, threads);
    return;
  }
  // Activations in each format the targets' kernels take (f32 rows are used as they are), each
  // format made once. Offsets into the scratch, not pointers: a later resize would move it.
  struct Prepared {
    WeightKernel kernel;
    std::size_t act_offset;  // SIZE_MAX: the f32 rows of x
    std::size_t act_row_bytes;
  };
  constexpr std::size_t kMaxTargets = 4;  // Q/K/V, gate/up: a fixed array, no allocation per call
  if (targets.size() > kMaxTargets) throw Error("weight_matmul: more than 4 matrices in one call");
  Prepared prepared[kMaxTargets];
  std::size_t act_bytes = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const WeightKernel kernel = weight_kernel(targets[i].w->type);
    Prepared& p = prepared[i];
    p = {kernel, SIZE_MAX, ldx * sizeof(float)};
    if (kernel.quantize == nullptr) continue;
    p.act_row_bytes = activation_row_bytes(kernel.activation, cols);
    for (std::size_t j = 0; j < i; ++j)  // the same format made for an earlier target
      if (prepared[j].kernel.quantize == kernel.quantize) p.act_offset = prepared[j].act_offset;
    if (p.act_offset != SIZE_MAX) continue;
    p.act_offset = act_bytes;
    act_bytes += tokens * p.act_row_bytes;
    if (scratch.activations.size() < act_bytes) scratch.activations.resize(act_bytes);
    for (std::size_t tok = 0; tok < tokens; ++tok)
      kernel.quantize(x + tok * ldx, scratch.activations.data() + p.act_offset + tok * p.act_row_bytes, cols);
  }
  auto activations = [&](const Prepared& p) -> const void* {
    return p.act_offset == SIZE_MAX ? static_cast<const void*>(x) : scratch.activations.data() + p.act_offset;
  };
  std::size_t total_rows = 0;
  for (const MatmulTarget& t : targets) total_rows += t.w->rows;
  // One fork/join for all rows; chunks of at least 16 rows, each a contiguous slice of weights.
  parallel_for(total_rows, 16, threads, [&](std::size_t begin, std::size_t end) {
    std::size_t base = 0;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const WeightMatrix& w = *targets[i].w;
      const std::size_t lo = std::max(begin, base), hi = std::min(end, base + w.rows);
      if (lo < hi) {
        const Prepared& p = prepared[i];
        p.kernel.matmul({w.data + (lo - base) * w.row_bytes, w.row_bytes, activations(p), p.act_row_bytes,
                         targets[i].y + (lo - base), targets[i].ldy, hi - lo, tokens, cols});
      }
      base += w.rows;
    }
  });
}

void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, MatmulScratch& scratch, int threads) {
  const MatmulTarget target{&w, y, ldy};
  weight_matmul({&target, 1}, x, tokens, ldx, scratch, threads);
}

}  // namespace cpudl::llm
