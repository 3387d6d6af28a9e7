// y = x W^T for a weight matrix in any compute type, over the thread pool.
// - A few tokens (generation): the weight kernels, rows of W split across threads, activations
//   quantised once (Q8_0 or Q8_K) for the integer kernels; memory-bound, the weights read once.
// - A prompt (kPromptMinTokens tokens or more): compute-bound. Each thread packs the tokens'
//   activations 16 at a time, k-major, and walks its rows of W six at a time through the
//   weight-rows GEMM microkernel (kernels/gemm/gemm.h: W's elements broadcast from the rows as
//   stored, so F32 weights are used in place in the mapping and the other types are converted
//   into a six-row f32 panel that then serves every token), at 80-90% of the FMA roof here.
//   Q4_0 goes through int8 instead: eight rows at a time repacked into an interleaved panel
//   (kernel_types.h's Q4_0x8Block) against the tokens' activations in Q8 blocks, faster than the
//   f32 path (4-bit weights let maddubs products add up in int16 across a block, the trick of
//   llama.cpp's repacked Q4_0; cpudl repacks per call, so the weights stay in the mapping).
//   Q8_0 does the same on AVX512-VNNI CPUs, weights biased to unsigned bytes (Q8_0x8Block). On
//   AVX2 its product would need a sign fix-up and an int32 widening per 4 columns, which costs as
//   much as the f32 FMAs it would replace, so there Q8_0 stays on the f32 path. On AMX CPUs both
//   types take the tile product (Q8_0x16Block) over panels repacked once at load
//   (repack_at_load), unless the model is loaded without repacking (ModelLoadOptions).
// - A few tokens (2 to 7: several sequences decoding at once, Context::eval_batch): the int8
//   panels already pay (each weight block unpacked once for every token), the float prompt path
//   does not (its slivers are 16 tokens wide), so each matrix takes the path of its type.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernel_types.h"
#include "llm/model/model_impl.h"
#include "runtime/aligned_buffer.h"
#include "runtime/team.h"

namespace cpudl::llm {

// Buffers a matmul reuses from call to call: the quantised activations.
struct MatmulScratch {
  std::vector<std::uint8_t> activations;  // quantised activations (Q8 rows)
  AlignedBuffer packed;                   // a prompt's activations packed for the GEMM microkernel
};

// y[t * ldy + r] = sum_c W[r][c] x[t * ldx + c] for t < tokens, r < W.rows; over `threads`
// (forked), or by every member of a team (runtime/team.h), each calling it.
void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, MatmulScratch& scratch, int threads);
void weight_matmul(const WeightMatrix& w, const float* x, std::size_t tokens, std::size_t ldx, float* y,
                   std::size_t ldy, MatmulScratch& scratch, Workers& workers);

// Several matrices of the same input width applied to the same x (Q, K and V; gate and up) in
// one pass: one fork/join for all their rows in generation, one wider SGEMM in a prompt.
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;
  std::size_t ldy;
};
void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, int threads);
void weight_matmul(std::span<const MatmulTarget> targets, const float* x, std::size_t tokens, std::size_t ldx,
                   MatmulScratch& scratch, Workers& workers);

// Panels made once at load, besides the mapping, unless ModelLoadOptions::repack is off. On a CPU whose
// prompt product runs on AMX tiles, a Q8_0 or Q4_0 matrix gets its tile panels
// (WeightMatrix::tile_panels): 36 bytes per 32 values, about a Q8_0 matrix's size again (twice a
// Q4_0 one's); generation reads a Q8_0 matrix's tile panels too (the VNNI gemv). On a VNNI CPU a
// Q4_0 matrix also gets 4-bit generation panels (gen_panels), its own size again, a Q4_K
// matrix its generation panels (q4_k_panels), its own size and 3%, and a Q6_K matrix its
// (q6_k_panels), its own size. Returns the bytes allocated
// (0: not this CPU or not this type).
std::uint64_t repack_at_load(WeightMatrix& w, int threads);
// The panels repack_at_load makes of w on this CPU, by kind: bytes (0: none of that kind).
struct PanelPlan {
  std::uint64_t tile = 0;  // Q8_0x16Block: AMX tiles; on VNNI, Q8_0's prompts and generation
  std::uint64_t q4_0 = 0;  // Q4_0x16Block: Q4_0 generation and prompts on VNNI
  std::uint64_t q4_k = 0;  // Q4_Kx16Block: Q4_K generation on VNNI
  std::uint64_t q6_k = 0;  // Q6_Kx16Block: Q6_K generation on VNNI
  std::uint64_t bytes() const { return tile + q4_0 + q4_k + q6_k; }
};
PanelPlan panel_plan(const WeightMatrix& w);

// The activation format a weight type's kernel takes, and its kernel.
constexpr std::size_t kPromptMinTokens = 8;
constexpr std::size_t kInt8PanelMinTokens = 2;

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
