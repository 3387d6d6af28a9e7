// Signatures of cpudl's native kernels and the parameter blocks they take. Plain declarations
// and aggregates only: this header is included by ISA-flagged files (see dispatch.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cpudl::kernels {

// Elementwise over n contiguous floats.
using F32BinaryFn = void (*)(const float* a, const float* b, float* out, std::size_t n);
using F32UnaryFn = void (*)(const float* x, float* out, std::size_t n);
// dx = f'(.) * dy, where the first argument is the forward input x (relu, gelu) or the forward
// output y (sigmoid, tanh): whichever makes the derivative cheapest.
using F32UnaryBackwardFn = void (*)(const float* saved, const float* dy, float* dx, std::size_t n);

using F32ReduceFn = float (*)(const float* x, std::size_t n);
// Index of the first maximum (inputs without NaN).
using F32ArgmaxFn = std::size_t (*)(const float* x, std::size_t n);
// out: room for n positions.
using F32IndicesAboveFn = std::size_t (*)(const float* x, std::size_t n, float threshold, std::int32_t* out);
// NMS's test: whether `query` overlaps any of n boxes by an intersection over union above
// `threshold`. Boxes as ordered corners; the n boxes column by column, the query as {x1, y1, x2,
// y2, area}. A box overlaps when width and height of the intersection are positive, its area and
// the union are positive, and intersection / union > threshold (ONNX Runtime's division).
struct BoxColumns {
  const float *x1, *y1, *x2, *y2, *area;
};
using BoxOverlapsAnyFn = bool (*)(const BoxColumns& boxes, std::size_t n, const float* query,
                                  float threshold);

// Row-wise over `rows` rows of `cols` floats, rows `ld_in` / `ld_out` floats apart.
using F32RowwiseFn = void (*)(const float* x, float* y, std::size_t rows, std::size_t cols, std::size_t ld_in,
                              std::size_t ld_out);

// Cross-entropy of logits rows against integer labels (each in [0, classes)), with label
// smoothing: target = (1 - smoothing) one_hot + smoothing / classes. Writes the loss of each row
// and, when dlogits is not null, d loss_row / d logits = softmax - target.
struct CrossEntropyArgs {
  const float* logits;
  const std::int32_t* labels;
  std::size_t rows, classes, ld_logits;
  float smoothing;
  float* loss;     // rows
  float* dlogits;  // rows x classes (ld_grad apart), or null
  std::size_t ld_grad;
  float* scratch;  // `classes` floats the kernel may overwrite (a row's exponentials)
};
using CrossEntropyFn = void (*)(const CrossEntropyArgs& args);

// Layer norm over the last dimension (cols) of contiguous rows; gamma/beta may be null (1 / 0).
// Forward saves mean and rstd = 1/sqrt(var + eps) per row (biased variance, as PyTorch).
using LayerNormForwardFn = void (*)(const float* x, const float* gamma, const float* beta, float* y,
                                    float* mean, float* rstd, std::size_t rows, std::size_t cols,
                                    float epsilon);
// Writes dx and ADDS the rows' contributions into dgamma and dbeta (each may be null).
using LayerNormBackwardFn = void (*)(const float* x, const float* dy, const float* gamma, const float* mean,
                                     const float* rstd, float* dx, float* dgamma, float* dbeta,
                                     std::size_t rows, std::size_t cols);
// RMSNorm (Llama) of `rows` contiguous rows of `cols`: y = x / sqrt(mean(x^2) + epsilon) * weight.
using RmsNormFn = void (*)(const float* x, const float* weight, float* y, std::size_t rows, std::size_t cols,
                           float epsilon);

// PyTorch's SGD: g += wd p; buf = momentum buf + (1 - dampening) g (buf = g on the first step);
// g = nesterov ? g + momentum buf : buf; p -= lr g. momentum_buffer unused when momentum == 0.
struct SgdParams {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};
using SgdStepFn = void (*)(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                           const SgdParams& p);

// PyTorch's Adam / AdamW (decoupled = true): one pass over param, grad, m and v.
struct AdamParams {
  float lr, beta1, beta2, epsilon, weight_decay;
  bool decoupled;
  std::int64_t step;  // 1 on the first update
};
using AdamStepFn = void (*)(float* param, const float* grad, float* m, float* v, std::size_t n,
                            const AdamParams& p);

using FmaProbeFn = std::uint64_t (*)(std::uint64_t iterations, float* sink);

// One GEMM microkernel call (see kernels/gemm/gemm.h): C[rows x cols] (+)= A sliver x B sliver
// over k steps, packed mr rows (a[p * mr + i]) and nr columns (b[p * nr + j]). Only rows < rows
// (<= mr) and columns < cols (<= nr) of C are read or written, and B's columns past cols are not
// read (the packing need not fill them).
struct GemmTileArgs {
  std::int64_t k;
  const float* a;
  const float* b;
  float* c;
  std::int64_t ldc;
  int rows, cols;
  bool accumulate;
};
using GemmMicrokernelFn = void (*)(const GemmTileArgs& args);
// Packs `rows` (<= the tile's mr) rows of row-major A, lda apart, kc columns each, as the tile's
// A sliver: sliver[p * mr + i] = a[i * lda + p], rows past `rows` zero; nothing past mr * kc.
using GemmPackFn = void (*)(const float* a, std::int64_t lda, std::int64_t rows, std::int64_t kc,
                            float* sliver);
// A GEMM microkernel with its tile and the block the driver (src/dense/blas/native_gemm.cpp) sizes
// around it: kc rows of k per packed sliver; pack_a packs its A slivers from row-major A, pack_b
// its B slivers from a transposed op(B) (rows of B are columns of op(B): the same packing with nr
// rows, sliver[p * nr + j] = b[j * ldb + p]).
struct GemmTile {
  GemmMicrokernelFn fn;
  int mr, nr;
  std::int64_t kc;
  GemmPackFn pack_a, pack_b;
};
// The weight-rows form: C^T tile c[j * ldc + i] = A rows (lda apart) x packed B sliver, for i <
// rows <= 6 and j < cols <= 16, prefetching `prefetch_lines` cache lines from `prefetch` on the
// way (see kernels/gemm/gemm.h).
struct GemmRowsArgs {
  std::int64_t k;
  const float* a;
  std::int64_t lda;
  int rows;
  const float* b_panel;
  float* c;
  std::int64_t ldc;
  int cols;
  const void* prefetch = nullptr;
  std::int64_t prefetch_lines = 0;
};
using GemmRowsMicrokernelFn = void (*)(const GemmRowsArgs& args);

// Q4_0 rows repacked eight at a time for the int8 prompt product (llm/model/weight_matmul.h): the
// weights stay as stored in the mapping, a panel is made per call and serves every token. Per
// 32-value block: the 8 rows' scales as floats, then per group of 4 columns the 8 rows' 4 values
// (0-15, the offset of 8 not applied) as 32 bytes, [row * 4 + column] -- one vector whose maddubs
// with 4 broadcast activation bytes gives each row its partial sum, with no horizontal adds.
struct Q4_0x8Block {
  float d[8];
  std::uint8_t q[8][32];  // [column group][row * 4 + column]
};
// `rows` (<= 8) Q4_0 rows, w_row_bytes apart, of k values into k / 32 panel blocks; missing rows
// are zeros.
using PackQ4_0x8Fn = void (*)(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                              Q4_0x8Block* panel);
// Q8_0 rows in the same layout for VNNI's VPDPBUSD, which multiplies unsigned bytes by signed
// ones: each weight is stored biased, w + 128 (w XOR 0x80, 1-255), against the signed activation
// bytes; the bias comes back out per block as 128 times the activation block's sum, which the Q8
// activation block already carries. (Biasing the activations instead would need each weight
// block's sum; without VNNI, VPMADDUBSW's int16 pair sums of 255 x 127 would saturate, which is
// why AVX2 has no variant of the product.)
struct Q8_0x8Block {
  float d[8];
  std::uint8_t q[8][32];  // [column group][row * 4 + column], w + 128
};
using PackQ8_0x8Fn = void (*)(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                              Q8_0x8Block* panel);
// y[t * ldy + r] = sum_k W[r][k] x[t][k] for r < rows (<= 8), t < tokens, from a panel and the
// activations as BlockQ8A rows x_row_bytes apart (quantize_row_q8a).
using Q4_0x8GemmFn = void (*)(const Q4_0x8Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                              std::size_t tokens, float* y, std::size_t ldy, int rows);
using Q8_0x8GemmFn = void (*)(const Q8_0x8Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                              std::size_t tokens, float* y, std::size_t ldy, int rows);

// Sixteen Q8_0 or Q4_0 rows (Q4_0's nibbles minus 8) as AMX's TDPBSSD reads its B tile: per
// block of 32 values, the rows' scales and 8 tile rows of 64 bytes, tile row j holding values
// 4j..4j+3 of each of the 16 rows (q[j][r * 4 + c]). Signed bytes against the signed activation
// bytes: no bias. One block is one TDPBSSD of K = 32: the blocks' scales differ, so each
// block's int32 sums are scaled into the float accumulators before the next.
struct Q8_0x16Block {
  float d[16];
  std::int8_t q[8][64];
};
// `rows` (<= 16) Q8_0 (or Q4_0) rows of k values into k / 32 blocks; missing rows are zeros.
using PackQ8_0x16Fn = void (*)(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                               Q8_0x16Block* panel);
// Sixteen Q4_0 rows for generation on AVX512-VNNI, keeping 4 bits a value: per block of 32, the
// rows' scales (fp16, as stored) and 4 chunks of 64 bytes; in chunk c, byte i holds value
// 8c + i % 4 of row i / 4 in its low nibble and value 8c + 4 + i % 4 of the same row in its high
// one. Each nibble plane of a chunk is then a whole 64-byte (row * 4 + column) group of
// Q8_0x16Block, columns 8c-8c+3 and 8c+4-8c+7: one 512-bit load and a mask give VPDPBUSD two
// groups with no lane shuffle (rows 0-7 and 8-15 in the two planes of one group cost an
// insert per group, and measured 1.6x the instructions per block).
// Nibbles as stored (0-15): the offset of 8 comes back through the activation block's sum.
struct Q4_0x16Block {
  std::uint16_t d[16];
  std::uint8_t q[4][64];
};
using PackQ4_0x16Fn = void (*)(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                               Q4_0x16Block* panel);
using Q4_0x16GemvFn = void (*)(const Q4_0x16Block* panel, std::size_t k, const void* x, float* y,
                               std::size_t rows);
// Sixteen Q4_K rows for generation on AVX512-VNNI, per 256-value block: the rows' d and dmin
// (fp16, as stored), the 6-bit scale and min of each 32-value sub-block j unpacked to a byte per
// row (scales[j][row], mins[j][row]: the row kernel unpacks the 12 packed bytes of every block
// of every row on every token, a quarter of its instructions), and each sub-block's nibbles in
// Q4_0x16Block's chunk layout (q[j][c]: byte i holds value 8c + i % 4 of row i / 4 in its low
// nibble and 8c + 4 + i % 4 in its high one). 2,368 bytes per 16 x 256 values, 3% more than
// the rows. Nibbles as stored; value = d * scale * q - dmin * min, exactly as the rows.
struct Q4_Kx16Block {
  std::uint16_t d[16], dmin[16];
  std::uint8_t scales[8][16], mins[8][16];
  std::uint8_t q[8][4][64];
};
using PackQ4_Kx16Fn = void (*)(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                               Q4_Kx16Block* panel);
// Q6_K's generation panels (q6_kx16_q8_k_gemv): sixteen rows of one 256-value block side by
// side, in as many bytes as the rows (3,360 per 16 x 256 values, 210 a row). d as stored; each
// 16-value sub-block's int8 scale per row (scales[j][row]); its low nibbles as two chunks in
// Q4_0x16Block's layout (low[j][c]: byte i holds value 16j + 8c + i % 4 of row i / 4 in its low
// nibble and 16j + 8c + 4 + i % 4 in its high one); its high two bits as one chunk (high[j]: byte
// i holds in bits 2g..2g+1 those of value 16j + 4g + i % 4 of row i / 4). So each 16-row x
// 4-value group is one 512-bit load of nibbles and one of high bits away from VPDPBUSD, where the
// rows keep a value's bits 32 and 64 bytes apart. q unsigned as stored (0..63); value = d * scale
// * (q - 32), exactly as the rows.
struct Q6_Kx16Block {
  std::uint16_t d[16];
  std::int8_t scales[16][16];
  std::uint8_t low[16][2][64];
  std::uint8_t high[16][64];
};
using PackQ6_Kx16Fn = void (*)(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                               Q6_Kx16Block* panel);
// One token: y[r] = sum_k W[r][k] x[k] for r < rows, the panel holding (rows + 15) / 16 groups of
// k / 256 blocks each, group after group; x one BlockQ8_K row.
using Q4_Kx16GemvFn = void (*)(const Q4_Kx16Block* panel, std::size_t k, const void* x, float* y,
                               std::size_t rows);
using Q6_Kx16GemvFn = void (*)(const Q6_Kx16Block* panel, std::size_t k, const void* x, float* y,
                               std::size_t rows);
// One token: y[r] = sum_k W[r][k] x[k] for r < rows, the panel holding (rows + 15) / 16 groups of
// k / 32 blocks each, group after group; x one BlockQ8A row.
using Q8_0x16GemvFn = void (*)(const Q8_0x16Block* panel, std::size_t k, const void* x, float* y,
                               std::size_t rows);
// As Q8_0x8GemmFn, for rows <= 16: the tile product (q8_0x16_q8a_gemm, AMX) and the dot-product
// one (q8_0x16_q8a_dot_gemm, VPDPBUSD: CPUs without tiles, and fewer tokens than a tile holds).
using Q8_0x16GemmFn = void (*)(const Q8_0x16Block* panel, std::size_t k, const void* x,
                               std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                               int rows);
// The same over Q4_0's generation panels (several tokens: prompts, sequences decoding together).
using Q4_0x16GemmFn = void (*)(const Q4_0x16Block* panel, std::size_t k, const void* x,
                               std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                               int rows);
// The same over Q4_K's and Q6_K's generation panels, x BlockQ8_K rows (prompts of K-quant models).
using Q4_Kx16GemmFn = void (*)(const Q4_Kx16Block* panel, std::size_t k, const void* x,
                               std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                               int rows);
using Q6_Kx16GemmFn = void (*)(const Q6_Kx16Block* panel, std::size_t k, const void* x,
                               std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                               int rows);

// Matrix products with LLM weights in GGUF block formats (kernels/quant/ggml_blocks.h):
//   y[t * ldy + r] = sum_k W[r][k] * x[t][k]   for r < rows, t < tokens,
// W rows w_row_bytes apart in the kernel's weight type, x rows x_row_bytes apart in its activation
// type (f32, or the Q8_0 / Q8_K blocks a quantize-row kernel writes). k is a multiple of the
// weight type's block size. Tokens are taken a few at a time so each weight block loaded from
// memory serves several of them.
struct WeightMatmulArgs {
  const void* w;
  std::size_t w_row_bytes;
  const void* x;
  std::size_t x_row_bytes;
  float* y;
  std::size_t ldy;
  std::size_t rows, tokens, k;
};
using WeightMatmulFn = void (*)(const WeightMatmulArgs& args);
// One row of k floats to activation blocks (k a multiple of the block size).
using QuantizeRowFn = void (*)(const float* x, void* blocks, std::size_t k);
// One row of k values in a weight type to floats.
using DequantizeRowFn = void (*)(const void* in, float* out, std::size_t k);

// Dynamic int8 product (ONNX's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul -> Add, in
// one pass): for the rows of A (u8, zero point a_zero, scale a_scale; given as prepared by
// prepare_u8s8_rows) and the columns [n_begin, n_end) of B (s8, packed by pack_u8s8_weights,
// symmetric, per-column scales),
//   c[m][n] = float(sum_k a[m][k] b[k][n] - a_zero sum_k b[k][n]) * (a_scale * b_scale[n]) + bias[n]
// with the int32 sum exact and the float steps in that order (the unfused graph's rounding).
// n_begin is a multiple of 8 (the packed column block).
struct U8S8GemmArgs {
  const std::uint8_t* a;            // a, rows of lda (a multiple of 4) padded with zeros
  const std::int8_t* a_shifted;     // a - 128, the same layout
  const std::uint8_t* a_magnitude;  // |a - 128|, the same layout
  std::size_t lda;
  std::size_t m, k;
  std::int32_t a_zero;
  float a_scale;
  const std::int8_t* b_packed;
  bool b_seven_bit;                // every weight in [-64, 63] (pack_u8s8_weights says)
  const std::int32_t* b_col_sums;  // sum_k b[k][n], n < n_end
  const float* b_scale;            // per column, or one value when b_scale_per_column is false
  bool b_scale_per_column;
  const float* bias;  // per column, or null
  bool relu;          // max(0, .) after the bias
  float* c;
  std::size_t ldc;
  std::size_t n_begin, n_end;
};
using U8S8GemmFn = void (*)(const U8S8GemmArgs& args);
// Smallest and largest of n floats (n >= 1).
// One image's convolution geometry, channels-last: x is H x W x IC, dy is OH x OW x OC.
struct ConvWindow {
  std::size_t in_channels, height, width, out_channels, out_h, out_w;
  std::size_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};
// Adds this image's weight gradient into dw [KH][KW][IC][OC_pad] (OC_pad = OC rounded up to 8;
// lanes past OC are scratch) and, when db is not null, its bias gradient into db [OC_pad].
using ConvBackwardWeightsFn = void (*)(const ConvWindow& w, const float* x, const float* dy, float* dw,
                                       float* db);
// A kernel row's share of a weight gradient (dense/conv/tap_gemm_weight_grad.h): a `rows` x 64 block
// of dW^T, c[i * 64 + j] += sum over `row_count` runs of `pixels` output pixels of
// x[r * x_row + p * x_step + i] * dy[r * dy_row + p * dy_step + j], for i < rows (1 to
// kTapGemmMaxRows) and j < 64. x: consecutive (tap, input channel) values each output pixel
// reads, where the padded input rows hold them; dy: 64 output channels of each output pixel.
inline constexpr int kTapGemmMaxRows = 6, kTapGemmColumns = 64;
struct TapGemmArgs {
  const float* x;
  std::int64_t x_step, x_row;
  const float* dy;
  std::int64_t dy_step, dy_row;
  std::int64_t pixels, row_count;
  int rows;
  float* c;
};
using TapGemmFn = void (*)(const TapGemmArgs& args);
// One tile of a 1x1 convolution run as a GEMM over pixels (kernels/pointwise/pointwise.h):
// c[i][j] = bias[j] + sum over p < k of a[i][p] * b[p * 64 + j], for i < rows (0 to
// kPointwiseMaxRows) and j < 64. a[i]: a pixel's k channels, read where they lie; b: 64 columns
// of the weights packed row by row; c[i]: 64 floats of an output pixel. Each row is followed by
// gaps[i] blocks of 64 zeros, gap_stride floats apart (c[i] + gap_stride, + 2 gap_stride, ...:
// the pixels a strided backward-data pass skips), and the call clears `zero_floats` floats at
// `zero` (skipped rows). `stream`: non-temporal stores; c rows, gaps and `zero` are then
// 64-byte aligned and zero_floats a multiple of 16. The caller fences after its last call.
// prefetch[r] for r < prefetch_rows: rows of k floats a later call reads, fetched on the way.
// The side work (the fetches and the skipped rows' zeros) is spread over the k loop: issued in
// a burst, the fetches stalled on the few misses a core tracks, and the zeros on its
// write-combining buffers, with the arithmetic waiting behind them.
inline constexpr int kPointwiseMaxRows = 6, kPointwiseColumns = 64;
struct PointwiseTileArgs {
  std::int64_t k;
  const float* const* a;
  const float* b;
  const float* bias;  // 64 floats, or null
  float* const* c;
  int rows;
  const int* gaps;  // rows counts, or null: no gaps
  std::int64_t gap_stride;
  float* zero;
  std::int64_t zero_floats;
  bool stream;
  const float* const* prefetch;
  int prefetch_rows;
};
using PointwiseTileFn = void (*)(const PointwiseTileArgs& args);
// One image of a stride-1, undilated convolution with few input channels in planar (NCHW)
// layout. The input is already padded: `in_channels` planes of `x_plane` floats, rows `x_ld`
// apart, (out_h + kernel_h - 1) rows of at least (out_w + kernel_w - 1) values. Outputs and
// output gradients are dense planes of out_h * out_w.
struct ConvPlanes {
  std::size_t in_channels, out_channels, out_h, out_w, kernel_h, kernel_w, x_ld, x_plane;
};
// y[oc] = (relu?) bias[oc] + sum over taps of w * x. `w` is packed [OC/8][IC][KH][KW][8] (OC
// rounded up to 8, zero-filled), `bias` [OC rounded up to 8].
using ConvForwardPlanesFn = void (*)(const ConvPlanes& p, const float* x, const float* w, const float* bias,
                                     bool relu, float* y);
// Adds this image's weight gradient into dw [OC][IC][KH][KW] and, when db is not null, the bias
// gradient into db [OC]. With `y` (the forward output of a fused ReLU) the gradient passes only
// where y > 0.
using ConvBackwardWeightsPlanesFn = void (*)(const ConvPlanes& p, const float* x, const float* dy,
                                             const float* y, float* dw, float* db);
// Linear layers with few outputs (kernels/narrow/narrow.h); `ld` is the row stride of x, w, dx, dw.
using NarrowLinearForwardFn = void (*)(const float* x, const float* w, float* y, std::size_t m, std::size_t k,
                                       std::size_t n, std::size_t ld);
using NarrowLinearBackwardDataFn = void (*)(const float* dy, const float* w, float* dx, std::size_t m,
                                            std::size_t k, std::size_t n, std::size_t ld);
using NarrowLinearBackwardWeightsFn = void (*)(const float* x, const float* dy, float* dw, std::size_t m,
                                               std::size_t k, std::size_t n, std::size_t ld);
// Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution (kernels/winograd/winograd.h) of a batch in a
// blocked layout: x is [N][C / block][H][W][block], y is [N][K / out_block][out_h][out_w][out_block],
// stride 1, `pad` zero rows and columns on each side; channels and out_channels are multiples of
// 8. The inference runtime's layout has block = out_block = 8 or 16; channels-last (NHWC, what
// training keeps) is the one-block case, block = channels and out_block = out_channels. Tile t of
// the batch is image t / (tiles_h * tiles_w), tile row and column within.
struct WinogradShape {
  std::size_t channels, out_channels, height, width, out_h, out_w, pad, block, out_block, tiles_h, tiles_w;
};
inline constexpr std::size_t kWinogradPositions = 36;    // the 6 x 6 transformed tile of F(4x4, 3x3)
inline constexpr std::size_t kWinogradPositionPad = 16;  // floats between positions (one line)
// Transformed tiles are stored in groups of 8 channels: a[p * (channels * v_rows + pad) + (c / 8
// * v_rows + i) * 8 + c % 8], pad = kWinogradPositionPad, is position p (row-major in the 6 x 6
// or 4 x 4 tile), channel c, of tile first_tile + i, for i < tiles. So 8 channels of consecutive tiles are
// contiguous (what the GEMM broadcasts from and the transforms stream through), with v_rows
// tiles of room per group. The pad keeps the 36 positions, which the transforms touch together,
// off a power-of-two stride: 24 tiles x 64 channels put them 6 KB apart, on 2 of L1's 64 sets.
// The input transform writes v in this form (C channels).
using WinogradInputFn = void (*)(const WinogradShape& s, const float* x, std::size_t first_tile,
                                 std::size_t tiles, float* v, std::size_t v_rows);
// For each of the positions p (36 or 16): m (K channels, grouped as above) = v (C channels) times u[p], where
// u[p][k / 16][c][k % 16] holds the transformed weights; for i < tiles and output channels
// [k_begin, k_end) (multiples of 16; K too).
using WinogradGemmFn = void (*)(std::size_t positions, const float* v, const float* u, float* m,
                                std::size_t tiles, std::size_t v_rows, std::size_t channels,
                                std::size_t out_channels, std::size_t k_begin, std::size_t k_end);
// y = min(max(inverse transform of m + bias + residual, lo), hi) for the tiles' output pixels
// inside the image and output channels [k_begin, k_end) (multiples of 8). bias ([K]) and
// residual (y's shape and layout) may be null.
struct WinogradEpilogue {
  const float* bias;
  const float* residual;
  float lo, hi;
};
using WinogradOutputFn = void (*)(const WinogradShape& s, const float* m, std::size_t first_tile,
                                  std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                  std::size_t k_end, const WinogradEpilogue& e, float* y);
// The weight transform: u[p][k / 16][c][k % 16] = (G g G^T)[p] (the GEMM's panels above) for
// output channels [k_begin, k_end) (multiples of 16) of a convolution with `channels` inputs and
// `out_channels` outputs, where the 3x3 filter g from input c to output k is weights[k][c]
// (OIHW) for a layer's forward pass, or for its backward-data pass (dx = dy convolved with the
// kernel rotated 180 degrees, inputs and outputs swapped) weights[c][k] rotated.
using WinogradWeightsFn = void (*)(const float* weights, std::size_t channels, std::size_t out_channels,
                                   bool backward_data, std::size_t k_begin, std::size_t k_end, float* u);
// The weight gradient by F(4x4, 3x3) (winograd.h): dU[p] = sum over tiles of V[p]^T (A dY A^T)[p],
// then dW = G^T dU G. The output-gradient transform writes m (grouped as above, K channels) =
// A dy A^T for the tiles' 4 x 4 blocks of dy (y's shape and layout; outside the image zero), for
// output channels [k_begin, k_end) (multiples of 8).
using WinogradOutputGradFn = void (*)(const WinogradShape& s, const float* dy, std::size_t first_tile,
                                      std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                      std::size_t k_end, float* m);
// For each of the 36 positions p: du[p][k / 16][c][k % 16] (+)= sum over tiles i < tiles of
// v[p] (channel c, tile i) * m[p] (channel k, tile i), for all C input channels and output
// channels [k_begin, k_end) (multiples of 16); accumulate adds to du instead of overwriting it.
using WinogradGemmWeightsFn = void (*)(const float* v, const float* m, float* du, std::size_t tiles,
                                       std::size_t v_rows, std::size_t channels, std::size_t out_channels,
                                       std::size_t k_begin, std::size_t k_end, bool accumulate);
// dw[k][c][3][3] (OIHW) = G^T du[.][k][c] G for output channels [k_begin, k_end) (multiples of 16).
using WinogradWeightGradFn = void (*)(const float* du, std::size_t channels, std::size_t out_channels,
                                      std::size_t k_begin, std::size_t k_end, float* dw);
// One image's pooling window geometry, channels-last (H x W x C). Padding taps are skipped.
struct PoolWindow {
  std::size_t channels, height, width, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};
// dst (out_h x out_w x C) = window maxima; argmax (may be null) = the winning tap kh * kernel_w + kw.
using MaxPoolNhwcFn = void (*)(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax);
// uint8 activations of the int8 graphs (quantised, so max pooling commutes with dequantising):
// dst (out_h x out_w x C) = window maxima over the taps inside the image.
using U8MaxPoolNhwcFn = void (*)(const PoolWindow& w, const std::uint8_t* src, std::uint8_t* dst);
// Writes all of diff_src (H x W x C): each diff_dst value added at its window's argmax.
using MaxPoolNhwcBackwardFn = void (*)(const PoolWindow& w, const float* diff_dst, const std::uint8_t* argmax,
                                       float* diff_src);
// dst[j * ld_dst + i] = src[i * ld_src + j] for i < rows, j < cols.
using F32TransposeFn = void (*)(const float* src, std::size_t rows, std::size_t cols, std::size_t ld_src,
                                float* dst, std::size_t ld_dst);
using F32MinMaxFn = void (*)(const float* x, std::size_t n, float* lo, float* hi);
// y = clamp(round_half_even(x / scale) + zero, 0, 255): ONNX QuantizeLinear to uint8.
using F32QuantizeU8Fn = void (*)(const float* x, std::size_t n, float scale, std::int32_t zero,
                                 std::uint8_t* y);

// Outputs at least this large are written with non-temporal stores (they would not stay cached
// anyway, and skipping each line's read-for-ownership saves memory traffic). Set once at start
// by streaming_store_threshold (dispatch.h) from the last-level cache: an output that fits in
// L3 is better left there for the op that reads it next.
extern std::size_t g_streaming_store_bytes;

}  // namespace cpudl::kernels
