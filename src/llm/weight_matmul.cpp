#include "llm/weight_matmul.h"

#include <algorithm>

#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "llm/quantize.h"
#include "onednn/dense.h"
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

// Prompt path: the matrices' rows in panels, each dequantised (by all threads) then one SGEMM.
// Several targets share a panel when they all need dequantising (F32 matrices are used in place).
void gemm_by_panels(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens,
                    MatmulScratch& scratch, int threads) {
  const std::size_t cols = targets[0].w->cols;
  const bool in_place = targets.size() == 1 && targets[0].w->type == GgmlType::f32;
  if (!in_place && targets.size() > 1 && std::any_of(targets.begin(), targets.end(), [](const MatmulTarget& t) {
        return t.w->type == GgmlType::f32;
      })) {
    for (const MatmulTarget& t : targets) gemm_by_panels({&t, 1}, x, tokens, scratch, threads);
    return;
  }
  // The targets' rows as one list, cut into panels of up to 4M floats (16 MB).
  std::size_t total_rows = 0;
  for (const MatmulTarget& t : targets) total_rows += t.w->rows;
  const std::size_t panel_rows = std::min(total_rows, std::max<std::size_t>(64, (std::size_t{4} << 20) / cols));
  auto locate = [&](std::size_t row, std::size_t& target, std::size_t& local) {
    target = 0;
    local = row;
    while (local >= targets[target].w->rows) local -= targets[target++].w->rows;
  };
  for (std::size_t r0 = 0; r0 < total_rows; r0 += panel_rows) {
    const std::size_t rows = std::min(panel_rows, total_rows - r0);
    const float* panel;
    if (in_place) {
      panel = reinterpret_cast<const float*>(targets[0].w->data + r0 * targets[0].w->row_bytes);
    } else {
      scratch.panel.resize(rows * cols);
      parallel_for(rows, 8, threads, [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; ++r) {
          std::size_t t, local;
          locate(r0 + r, t, local);
          const WeightMatrix& w = *targets[t].w;
          dequantize_row(w.type, w.data + local * w.row_bytes, scratch.panel.data() + r * cols, cols);
        }
      });
      panel = scratch.panel.data();
    }
    onednn::MatmulShape shape;
    shape.m = static_cast<std::int64_t>(tokens);
    shape.n = static_cast<std::int64_t>(rows);
    shape.k = static_cast<std::int64_t>(cols);
    shape.transpose_b = true;
    if (targets.size() == 1 && rows == total_rows && targets[0].ldy == rows) {
      onednn::matmul_onednn(shape, x, panel, targets[0].y);
      continue;
    }
    scratch.out.resize(tokens * rows);
    onednn::matmul_onednn(shape, x, panel, scratch.out.data());
    // Scatter the panel's columns to their targets, one contiguous run per (token, target).
    for (std::size_t r = 0; r < rows;) {
      std::size_t t, local;
      locate(r0 + r, t, local);
      const std::size_t run = std::min(rows - r, targets[t].w->rows - local);
      for (std::size_t tok = 0; tok < tokens; ++tok)
        std::copy_n(scratch.out.data() + tok * rows + r, run, targets[t].y + tok * targets[t].ldy + local);
      r += run;
    }
  }
}

}  // namespace

void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, int threads) {
  if (targets.empty()) return;
  const std::size_t cols = targets[0].w->cols;
  for (const MatmulTarget& t : targets)
    if (t.w->cols != cols) throw Error("weight_matmul: '" + t.w->name + "' does not take inputs of " + std::to_string(cols));
  if (tokens >= kGemmMinTokens && ldx == cols) {
    gemm_by_panels(targets, x, tokens, scratch, threads);
    return;
  }
  // Activations in each format the targets' kernels take (f32 rows are used as they are).
  struct Prepared {
    WeightKernel kernel;
    const void* act;
    std::size_t act_row_bytes;
  };
  std::vector<Prepared> prepared;
  prepared.reserve(targets.size());
  std::size_t act_offset = 0;
  for (const MatmulTarget& t : targets) {
    const WeightKernel kernel = weight_kernel(t.w->type);
    Prepared p{kernel, x, ldx * sizeof(float)};
    if (kernel.quantize != nullptr) {
      p.act_row_bytes = activation_row_bytes(kernel.activation, cols);
      for (const Prepared& q : prepared)  // the same format made for an earlier target
        if (q.kernel.quantize == kernel.quantize) p.act = q.act;
      if (p.act == x) {
        if (scratch.activations.size() < act_offset + tokens * p.act_row_bytes)
          scratch.activations.resize(act_offset + tokens * p.act_row_bytes);
        std::uint8_t* dst = scratch.activations.data() + act_offset;
        for (std::size_t tok = 0; tok < tokens; ++tok) kernel.quantize(x + tok * ldx, dst + tok * p.act_row_bytes, cols);
        p.act = dst;
        act_offset += tokens * p.act_row_bytes;
      }
    }
    prepared.push_back(p);
  }
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
        p.kernel.matmul({w.data + (lo - base) * w.row_bytes, w.row_bytes, p.act, p.act_row_bytes,
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
