#include "llm/model/weight_matmul.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/gemm.h"
#include "llm/gguf/quantize.h"
#include "runtime/aligned_buffer.h"
#include "runtime/parallel.h"
#include "runtime/team.h"
#include "runtime/zeroed_pages.h"

namespace cpudl::llm {

std::size_t activation_row_bytes(ActivationFormat format, std::size_t k) {
  switch (format) {
    case ActivationFormat::f32:
      return k * sizeof(float);
    case ActivationFormat::q8a:
      return k / 32 * sizeof(BlockQ8A);
    case ActivationFormat::q8k:
      return k / 256 * sizeof(BlockQ8_K);
  }
  return 0;
}

WeightKernel weight_kernel(GgmlType type) {
  const kernels::KernelTable& k = kernels::kernel_table();
  switch (type) {
    case GgmlType::f32:
      return {k.f32_f32_matmul.fn, nullptr, ActivationFormat::f32};
    case GgmlType::f16:
      return {k.f16_f32_matmul.fn, nullptr, ActivationFormat::f32};
    case GgmlType::bf16:
      return {k.bf16_f32_matmul.fn, nullptr, ActivationFormat::f32};
    case GgmlType::q8_0:
      return {k.q8_0_q8a_matmul.fn, k.quantize_row_q8a.fn, ActivationFormat::q8a};
    case GgmlType::q4_0:
      return {k.q4_0_q8a_matmul.fn, k.quantize_row_q8a.fn, ActivationFormat::q8a};
    case GgmlType::q4_k:
      return {k.q4_k_q8_k_matmul.fn, k.quantize_row_q8_k.fn, ActivationFormat::q8k};
    case GgmlType::q6_k:
      return {k.q6_k_q8_k_matmul.fn, k.quantize_row_q8_k.fn, ActivationFormat::q8k};
    default:
      throw Error("no kernel for tensor type " +
                  std::string(ggml_type_info(static_cast<std::uint32_t>(type))->name));
  }
}

namespace {

// Whether a prompt takes this weight type through int8 panels (int8_rows) instead of f32: Q4_0
// always; Q8_0 where VNNI multiplies its bytes unsigned-by-signed without a sign fix-up (the
// chosen kernel is then the VNNI one, not the reference).
bool int8_prompt(GgmlType type) {
  return type == GgmlType::q4_0 ||
         (type == GgmlType::q8_0 && kernels::kernel_table().q8_0x8_q8a_gemm.level >= IsaLevel::avx512_vnni);
}

// A Q4_K or Q6_K matrix repacked at load (VNNI CPUs) multiplies several tokens over its panels
// against Q8_K activations (q4_kx16_q8_k_gemm, q6_kx16_q8_k_gemm), as llama.cpp's K-quant
// products round them, where the float path dequantised every row of it for each chunk of tokens.
bool k_quant_prompt(const WeightMatrix& w) {
  const kernels::KernelTable& k = kernels::kernel_table();
  return (w.q4_k_panels && k.q4_kx16_q8_k_gemm.level >= IsaLevel::avx512_vnni) ||
         (w.q6_k_panels && k.q6_kx16_q8_k_gemm.level >= IsaLevel::avx512_vnni);
}
bool int8_prompt(const WeightMatrix& w) { return int8_prompt(w.type) || k_quant_prompt(w); }

// Rows in int8 (kernel_types.h's Q4_0x8Block / Q8_0x8Block): eight rows at a time repacked into a
// panel whose column groups multiply 4 activation bytes for all eight rows in one maddubs or
// VPDPBUSD, against the tokens' activations quantised to Q8 blocks (as in generation). Q4_0 on
// AVX2 runs past the f32 FMA roof: 4-bit weights let the products add up in int16 across a whole
// block. The panel is made per call, so the weights stay in the mapping.
// On AMX (kernel_types.h's Q8_0x16Block), Q8_0 and Q4_0 matrices repacked at load go through
// the tile product, sixteen rows at a time. (Packed per call, the portable pack cost twice the
// product: 18% of a 128-token Q8_0 prompt against 10%.)
bool amx_type(GgmlType type) {
  return (type == GgmlType::q8_0 || type == GgmlType::q4_0) &&
         kernels::kernel_table().q8_0x16_q8a_gemm.level >= IsaLevel::amx;
}

// Below a full tile of tokens the AMX product loses to VPDPBUSD (the eight-row panels packed per
// call then): four sequences decoding together (Context::eval_batch), 134M Q8_0 on 2 threads,
// made 549 tokens/s in all on the tiles against 685 on the VNNI panels.
constexpr std::size_t kAmxMinTokens = 16;

// Whether a Q8_0 matrix gets the sixteen-row panels at load on a CPU without AMX: with VNNI, the
// dot-product kernel reads them for several tokens, where the eight-row panels would be packed
// on every call, and the gemv for one.
bool vnni_q8_panels(GgmlType type) {
  return type == GgmlType::q8_0 &&
         kernels::kernel_table().q8_0x16_q8a_dot_gemm.level >= IsaLevel::avx512_vnni;
}

// Whether generation reads Q8_0 tile panels (where they exist) through the VNNI gemv.
bool gemv_panels() { return kernels::kernel_table().q8_0x16_q8a_gemv.level >= IsaLevel::avx512_vnni; }

// Rows lo..hi of w through a sixteen-row panel product: `panels` hold the matrix's groups,
// cols / values blocks each.
template <class Panel, class Gemm>
void group_rows(const Panel* panels, Gemm gemm, const WeightMatrix& w, std::size_t lo, std::size_t hi,
                const void* x, std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                std::size_t values = 32) {
  const std::size_t blocks = w.cols / values;
  for (std::size_t r = lo; r < hi;) {  // lo need not start a group: take the group's rows from r on
    const std::size_t group = r / 16, end = std::min(hi, (group + 1) * 16);
    if (r == group * 16) {
      gemm(panels + group * blocks, w.cols, x, x_row_bytes, tokens, y + r, ldy, static_cast<int>(end - r));
    } else {
      // A range that starts inside a group: the group's product, kept only from r on.
      thread_local std::vector<float> part;
      part.resize(tokens * 16);
      gemm(panels + group * blocks, w.cols, x, x_row_bytes, tokens, part.data(), 16,
           static_cast<int>(end - group * 16));
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t i = r; i < end; ++i) y[t * ldy + i] = part[t * 16 + (i - group * 16)];
    }
    r = end;
  }
}

template <class Panel>
void int8_rows(const WeightMatrix& w, std::size_t lo, std::size_t hi, const void* x, std::size_t x_row_bytes,
               std::size_t tokens, float* y, std::size_t ldy) {
  constexpr int kPanelRows = 8;
  const kernels::KernelTable& k = kernels::kernel_table();
  thread_local AlignedBuffer panel;
  const std::size_t blocks = w.cols / 32;
  auto* p = reinterpret_cast<Panel*>(panel.get(blocks * sizeof(Panel) / sizeof(float)));
  for (std::size_t r = lo; r < hi; r += kPanelRows) {
    const int n = static_cast<int>(std::min<std::size_t>(kPanelRows, hi - r));
    if constexpr (std::is_same_v<Panel, kernels::Q4_0x8Block>) {
      k.pack_q4_0x8.fn(w.data + r * w.row_bytes, w.row_bytes, n, w.cols, p);
      k.q4_0x8_q8a_gemm.fn(p, w.cols, x, x_row_bytes, tokens, y + r, ldy, n);
    } else {
      k.pack_q8_0x8.fn(w.data + r * w.row_bytes, w.row_bytes, n, w.cols, p);
      k.q8_0x8_q8a_gemm.fn(p, w.cols, x, x_row_bytes, tokens, y + r, ldy, n);
    }
  }
}

// Prompt path: the activations are packed once (kGemmNr-token slivers, k-major); each thread
// walks its slice of the rows six at a time over chunks of tokens that stay in its L2,
// multiplying each group of rows by every sliver with the weight-rows GEMM microkernel. F32 rows
// are read in place from the mapping; the other types are converted into a six-row panel first,
// which then serves every token of the chunk. Q4_0 rows (and Q8_0 ones on VNNI) take int8_rows.
void prompt_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, Workers& workers) {
  constexpr std::size_t kRows = kernels::kGemmMr, kTokens = kernels::kGemmNr;
  const std::size_t cols = targets[0].w->cols;
  std::size_t total_rows = 0;
  bool any_int8 = false, any_q8k = false, any_float = false;
  for (const MatmulTarget& t : targets) {
    total_rows += t.w->rows;
    (k_quant_prompt(*t.w) ? any_q8k : int8_prompt(t.w->type) ? any_int8 : any_float) = true;
  }
  // The activations in each int8 format the matrices take: Q8A rows, then Q8_K rows.
  const std::size_t q8_row_bytes = activation_row_bytes(ActivationFormat::q8a, cols),
                    q8k_row_bytes = any_q8k ? activation_row_bytes(ActivationFormat::q8k, cols) : 0,
                    q8k_offset = any_int8 ? tokens * q8_row_bytes : 0;
  if (any_int8 || any_q8k) {
    workers.once([&] {
      const std::size_t bytes = q8k_offset + tokens * q8k_row_bytes;
      if (scratch.activations.size() < bytes) scratch.activations.resize(bytes);
    });
    const kernels::KernelTable& k = kernels::kernel_table();
    workers.split(tokens, 16, [&](std::size_t t0, std::size_t t1) {
      for (std::size_t t = t0; t < t1; ++t) {
        if (any_int8) k.quantize_row_q8a.fn(x + t * ldx, scratch.activations.data() + t * q8_row_bytes, cols);
        if (any_q8k)
          k.quantize_row_q8_k.fn(x + t * ldx, scratch.activations.data() + q8k_offset + t * q8k_row_bytes,
                                 cols);
      }
    });
  }
  // Every token packed once, in slivers of kTokens k-major (zero-padded past the last token),
  // shared by the threads; written in order, reading 16 rows side by side (a column-by-column
  // walk of a sliver touched a new cache line per element and took a sixth of the kernel's time).
  const std::size_t all_slivers = (tokens + kTokens - 1) / kTokens;
  float* packed = nullptr;
  if (any_float) {
    workers.once([&] { scratch.packed.get(all_slivers * kTokens * cols); });  // sized by one member,
    packed = scratch.packed.get(all_slivers * kTokens * cols);                // then only read
  }
  if (any_float)
    workers.split(all_slivers, 1, [&](std::size_t first, std::size_t last) {
      for (std::size_t s = first; s < last; ++s) {
        const float* src[kTokens];
        const std::size_t width = std::min(kTokens, tokens - s * kTokens);
        for (std::size_t j = 0; j < kTokens; ++j) src[j] = x + (s * kTokens + std::min(j, width - 1)) * ldx;
        float* dst = packed + s * kTokens * cols;
        for (std::size_t p = 0; p < cols; ++p)
          for (std::size_t j = 0; j < kTokens; ++j) dst[p * kTokens + j] = j < width ? src[j][p] : 0.0f;
      }
    });
  // Tokens in chunks whose packed activations stay in L2 while a thread's rows pass over them.
  const std::size_t token_chunk =
      std::max(kTokens, (std::size_t{256} << 10) / (cols * sizeof(float)) / kTokens * kTokens);
  const kernels::GemmRowsMicrokernelFn kernel = kernels::kernel_table().f32_gemm_rows_6x16.fn;
  workers.split(total_rows, 16, [&](std::size_t begin, std::size_t end) {
    thread_local AlignedBuffer panel;
    std::size_t base = 0;
    for (const MatmulTarget& target : targets) {
      const WeightMatrix& w = *target.w;
      const std::size_t lo = std::max(begin, base), hi = std::min(end, base + w.rows);
      const kernels::KernelTable& k = kernels::kernel_table();
      const void* xq = scratch.activations.data();
      const std::uint8_t* xq8k = scratch.activations.data() + q8k_offset;
      if (lo < hi && k_quant_prompt(w) && w.q4_k_panels)
        group_rows(w.q4_k_panels.get(), k.q4_kx16_q8_k_gemm.fn, w, lo - base, hi - base, xq8k, q8k_row_bytes,
                   tokens, target.y, target.ldy, 256);
      else if (lo < hi && k_quant_prompt(w))
        group_rows(w.q6_k_panels.get(), k.q6_kx16_q8_k_gemm.fn, w, lo - base, hi - base, xq8k, q8k_row_bytes,
                   tokens, target.y, target.ldy, 256);
      else if (lo < hi && w.tile_panels && amx_type(w.type) && tokens >= kAmxMinTokens)
        group_rows(w.tile_panels.get(), k.q8_0x16_q8a_gemm.fn, w, lo - base, hi - base, xq, q8_row_bytes,
                   tokens, target.y, target.ldy);
      else if (lo < hi && w.gen_panels && k.q4_0x16_q8a_gemm.level >= IsaLevel::avx512_vnni)
        group_rows(w.gen_panels.get(), k.q4_0x16_q8a_gemm.fn, w, lo - base, hi - base, xq, q8_row_bytes,
                   tokens, target.y, target.ldy);
      else if (lo < hi && w.tile_panels && k.q8_0x16_q8a_dot_gemm.level >= IsaLevel::avx512_vnni)
        group_rows(w.tile_panels.get(), k.q8_0x16_q8a_dot_gemm.fn, w, lo - base, hi - base, xq, q8_row_bytes,
                   tokens, target.y, target.ldy);
      else if (lo < hi && w.type == GgmlType::q4_0)
        int8_rows<kernels::Q4_0x8Block>(w, lo - base, hi - base, scratch.activations.data(), q8_row_bytes,
                                        tokens, target.y, target.ldy);
      else if (lo < hi && int8_prompt(w.type))
        int8_rows<kernels::Q8_0x8Block>(w, lo - base, hi - base, scratch.activations.data(), q8_row_bytes,
                                        tokens, target.y, target.ldy);
      base += w.rows;
    }
    for (std::size_t t0 = 0; any_float && t0 < tokens; t0 += token_chunk) {
      const std::size_t nt = std::min(token_chunk, tokens - t0), slivers = (nt + kTokens - 1) / kTokens;
      const float* xp = packed + t0 * cols;  // t0 is a whole number of slivers
      std::size_t base = 0;
      for (const MatmulTarget& target : targets) {
        const WeightMatrix& w = *target.w;
        const std::size_t lo = std::max(begin, base), hi = std::min(end, base + w.rows);
        for (std::size_t r = lo; r < hi && !int8_prompt(w); r += kRows) {
          const std::size_t n = std::min(kRows, hi - r);
          const float* rows = reinterpret_cast<const float*>(w.data + (r - base) * w.row_bytes);
          std::size_t lda = w.row_bytes / sizeof(float);
          if (w.type != GgmlType::f32) {
            float* converted = panel.get(kRows * cols);
            for (std::size_t i = 0; i < n; ++i)
              dequantize_row(w.type, w.data + (r - base + i) * w.row_bytes, converted + i * cols, cols);
            rows = converted;
            lda = cols;
          }
          // The next group's weights come from memory while this one computes, a share of them
          // in each sliver's kernel: a panel read on demand cost a quarter of the F32 time.
          const std::size_t next_bytes = std::min(kRows, hi > r + kRows ? hi - r - kRows : 0) * w.row_bytes;
          const std::uint8_t* next_rows = w.data + (r + kRows - base) * w.row_bytes;
          const std::size_t lines = (next_bytes + 63) / 64,
                            lines_per_sliver = (lines + slivers - 1) / slivers;
          for (std::size_t s = 0; s < slivers; ++s) {
            const std::size_t first = std::min(lines, s * lines_per_sliver);
            kernels::GemmRowsArgs args{
                static_cast<std::int64_t>(cols),
                rows,
                static_cast<std::int64_t>(lda),
                static_cast<int>(n),
                xp + s * kTokens * cols,
                target.y + (t0 + s * kTokens) * target.ldy + (r - base),
                static_cast<std::int64_t>(target.ldy),
                static_cast<int>(std::min(kTokens, nt - s * kTokens)),
                next_rows + first * 64,
                static_cast<std::int64_t>(std::min(lines, first + lines_per_sliver) - first)};
            kernel(args);
          }
        }
        base += w.rows;
      }
    }
  });
}

constexpr std::size_t kMaxTargets = 4;  // Q/K/V, gate/up: fixed arrays, no allocation per call

// Generation: each weight kernel over its rows, the activations quantised once per format.
void generation_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens,
                       std::size_t ldx, MatmulScratch& scratch, Workers& workers) {
  const std::size_t cols = targets[0].w->cols;
  // Activations in each format the targets' kernels take (f32 rows are used as they are), each
  // format made once. Offsets into the scratch, not pointers: a later resize would move it.
  struct Prepared {
    WeightKernel kernel;
    std::size_t act_offset;  // SIZE_MAX: the f32 rows of x
    std::size_t act_row_bytes;
  };
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
  }
  workers.once([&] {
    if (scratch.activations.size() < act_bytes) scratch.activations.resize(act_bytes);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const Prepared& p = prepared[i];
      const bool first_of_format =
          p.act_offset != SIZE_MAX && std::none_of(prepared, prepared + i, [&](const Prepared& q) {
            return q.act_offset == p.act_offset;
          });
      if (!first_of_format) continue;
      for (std::size_t tok = 0; tok < tokens; ++tok)
        p.kernel.quantize(x + tok * ldx, scratch.activations.data() + p.act_offset + tok * p.act_row_bytes,
                          cols);
    }
  });
  auto activations = [&](const Prepared& p) -> const void* {
    return p.act_offset == SIZE_MAX ? static_cast<const void*>(x) : scratch.activations.data() + p.act_offset;
  };
  std::size_t total_rows = 0;
  for (const MatmulTarget& t : targets) total_rows += t.w->rows;
  // One split for all rows; chunks of at least 16 rows, each a contiguous slice of weights.
  workers.split(total_rows, 16, [&](std::size_t begin, std::size_t end) {
    std::size_t base = 0;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const WeightMatrix& w = *targets[i].w;
      const std::size_t lo = std::max(begin, base), hi = std::min(end, base + w.rows);
      if (lo < hi) {
        const Prepared& p = prepared[i];
        auto rows_kernel = [&](std::size_t r0, std::size_t r1) {
          p.kernel.matmul({w.data + r0 * w.row_bytes, w.row_bytes, activations(p), p.act_row_bytes,
                           targets[i].y + r0, targets[i].ldy, r1 - r0, tokens, cols});
        };
        // One token: whole 16-row groups over the panels repacked at load -- a Q8_0 matrix's tile
        // panels (AMX CPUs), a Q4_0 matrix's 4-bit generation panels (VNNI CPUs; its tile panels
        // hold a byte per value and measured 20% slower than the mapped rows), a Q4_K or Q6_K
        // matrix's generation panels (VNNI CPUs) -- and any rows outside whole groups as mapped.
        const std::size_t r0 = lo - base, r1 = hi - base;
        const std::size_t g0 = (r0 + 15) / 16 * 16, g1 = r1 == w.rows ? r1 : r1 / 16 * 16;
        // (Without AMX, one token reads Q8_0's mapped rows: their kernel's four streams measured
        // faster than the gemv over the panels, 225-262 against 152-212 tokens/s on one thread.)
        const bool q8_panels = w.tile_panels && w.type == GgmlType::q8_0 && gemv_panels() && amx_type(w.type);
        if (tokens == 1 && (q8_panels || w.gen_panels || w.q4_k_panels || w.q6_k_panels) && g0 < g1) {
          if (r0 < g0) rows_kernel(r0, g0);
          const kernels::KernelTable& k = kernels::kernel_table();
          if (w.q4_k_panels)
            k.q4_kx16_q8_k_gemv.fn(w.q4_k_panels.get() + g0 / 16 * (cols / 256), cols, activations(p),
                                   targets[i].y + g0, g1 - g0);
          else if (w.q6_k_panels)
            k.q6_kx16_q8_k_gemv.fn(w.q6_k_panels.get() + g0 / 16 * (cols / 256), cols, activations(p),
                                   targets[i].y + g0, g1 - g0);
          else if (w.gen_panels)
            k.q4_0x16_q8a_gemv.fn(w.gen_panels.get() + g0 / 16 * (cols / 32), cols, activations(p),
                                  targets[i].y + g0, g1 - g0);
          else
            k.q8_0x16_q8a_gemv.fn(w.tile_panels.get() + g0 / 16 * (cols / 32), cols, activations(p),
                                  targets[i].y + g0, g1 - g0);
          if (g1 < r1) rows_kernel(g1, r1);
        } else {
          rows_kernel(r0, r1);
        }
      }
      base += w.rows;
    }
  });
}

}  // namespace

void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, Workers& workers) {
  if (targets.empty()) return;
  if (targets.size() > kMaxTargets) throw Error("weight_matmul: more than 4 matrices in one call");
  const std::size_t cols = targets[0].w->cols;
  for (const MatmulTarget& t : targets)
    if (t.w->cols != cols)
      throw Error("weight_matmul: '" + t.w->name + "' does not take inputs of " + std::to_string(cols));
  if (ldx == cols && tokens >= kPromptMinTokens) {
    prompt_matmul(targets, x, tokens, ldx, scratch, workers);
    return;
  }
  // A few tokens (several sequences decoding at once): the int8 panels pay from two tokens on,
  // the float prompt path (16-token slivers) only from kPromptMinTokens; each matrix takes its
  // path by its own type, so its result never depends on the matrices it is called with.
  MatmulTarget panel[kMaxTargets], rest[kMaxTargets];
  std::size_t n_panel = 0, n_rest = 0;
  for (const MatmulTarget& t : targets)
    (ldx == cols && tokens >= kInt8PanelMinTokens && int8_prompt(*t.w) ? panel[n_panel++] : rest[n_rest++]) =
        t;
  if (n_panel > 0) prompt_matmul({panel, n_panel}, x, tokens, ldx, scratch, workers);
  if (n_rest > 0) generation_matmul({rest, n_rest}, x, tokens, ldx, scratch, workers);
}

void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, int threads) {
  Workers forked(threads);
  weight_matmul(targets, x, tokens, ldx, scratch, forked);
}

void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, MatmulScratch& scratch, Workers& workers) {
  const MatmulTarget target{&w, y, ldy};
  weight_matmul({&target, 1}, x, tokens, ldx, scratch, workers);
}

void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, MatmulScratch& scratch, int threads) {
  Workers forked(threads);
  weight_matmul(w, x, tokens, ldx, y, ldy, scratch, forked);
}

namespace {

// `pack` run over the matrix's 16-row groups on the threads, into a new array of Panel blocks of
// `values` columns each.
template <class Panel, class Pack>
std::shared_ptr<const Panel[]> pack_groups(const WeightMatrix& w, Pack pack, int threads,
                                           std::size_t values = 32) {
  const std::size_t blocks = w.cols / values, groups = (w.rows + 15) / 16;
  auto panels = shared_zeroed_pages<Panel>(groups * blocks);
  parallel_for(groups, 1, threads, [&](std::size_t first, std::size_t last) {
    for (std::size_t g = first; g < last; ++g)
      pack(w.data + g * 16 * w.row_bytes, w.row_bytes,
           static_cast<int>(std::min<std::size_t>(16, w.rows - g * 16)), w.cols, panels.get() + g * blocks);
  });
  return panels;
}

}  // namespace

PanelPlan panel_plan(const WeightMatrix& w) {
  const kernels::KernelTable& k = kernels::kernel_table();
  PanelPlan plan;
  const std::size_t groups = (w.rows + 15) / 16;
  if (w.type == GgmlType::q4_k && w.cols % 256 == 0 && k.q4_kx16_q8_k_gemv.level >= IsaLevel::avx512_vnni)
    plan.q4_k = groups * (w.cols / 256) * sizeof(kernels::Q4_Kx16Block);
  if (w.type == GgmlType::q6_k && w.cols % 256 == 0 && k.q6_kx16_q8_k_gemv.level >= IsaLevel::avx512_vnni)
    plan.q6_k = groups * (w.cols / 256) * sizeof(kernels::Q6_Kx16Block);
  if (w.cols % 32 != 0) return plan;
  if (amx_type(w.type) || vnni_q8_panels(w.type))
    plan.tile = groups * (w.cols / 32) * sizeof(kernels::Q8_0x16Block);
  if (w.type == GgmlType::q4_0 && k.q4_0x16_q8a_gemv.level >= IsaLevel::avx512_vnni)
    plan.q4_0 = groups * (w.cols / 32) * sizeof(kernels::Q4_0x16Block);
  return plan;
}

std::uint64_t repack_at_load(WeightMatrix& w, int threads) {
  const kernels::KernelTable& k = kernels::kernel_table();
  const PanelPlan plan = panel_plan(w);
  if (plan.q4_k) w.q4_k_panels = pack_groups<kernels::Q4_Kx16Block>(w, k.pack_q4_kx16.fn, threads, 256);
  if (plan.q6_k) w.q6_k_panels = pack_groups<kernels::Q6_Kx16Block>(w, k.pack_q6_kx16.fn, threads, 256);
  if (plan.tile)
    w.tile_panels = pack_groups<kernels::Q8_0x16Block>(
        w, (w.type == GgmlType::q4_0 ? k.pack_q4_0x16 : k.pack_q8_0x16).fn, threads);
  if (plan.q4_0) w.gen_panels = pack_groups<kernels::Q4_0x16Block>(w, k.pack_q4_0x16_nibbles.fn, threads);
  return plan.bytes();
}

}  // namespace cpudl::llm
