// The tap-major weight gradient's driver (see the header). Threads take groups of images, each
// group with its own dW^T (summed by the final reorder).
#include "dense/conv/tap_gemm_weight_grad.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::conv {

namespace {

constexpr std::int64_t kColumns = kernels::kTapGemmColumns, kMaxRows = kernels::kTapGemmMaxRows;
// Output pixels per block: whole output rows, about this many. The block's dY panel (56 x 64
// floats, 14 KB) and the x lines one kernel row walks share L1 with room to spare; 56 measured a little
// faster than 96 and 196 (layer2.0 and layer4.0, 1 thread).
constexpr std::int64_t kBlockPixels = 56;
// Narrower output rows make each block call too short to amortise its 24 accumulator loads and
// stores: ResNet-18's layer3.0 at 32x32 input (2-pixel rows) ran at 0.6x the implicit GEMM's speed,
// layer2.0 there (4-pixel rows) at 1.07x (1 thread) and 1.19x (2 threads) oneDNN's.
constexpr std::int64_t kMinRowPixels = 4;

}  // namespace

bool tap_gemm_weight_grad_applies(const dense::ConvShape& s) {
  static const bool enabled = switched_on("CPUDL_TAP_GEMM");
  return enabled && s.layout == dense::ActivationLayout::nhwc && s.groups == 1 && s.dilation_h == 1 &&
         s.dilation_w == 1 && s.out_channels % kColumns == 0 && s.out_height() > 0 && s.out_width() > 0;
}

bool tap_gemm_weight_grad_preferred(const dense::ConvShape& s) {
  return tap_gemm_weight_grad_applies(s) &&
         kernels::kernel_table().f32_conv_weight_grad_taps.level == IsaLevel::avx512 &&
         (s.stride_h > 1 || s.stride_w > 1) && s.kernel_h * s.kernel_w > 1 && s.in_channels <= 128 &&
         s.out_width() >= kMinRowPixels;
}

void tap_gemm_weight_grad(const dense::ConvShape& s, const float* x, const float* dy, float* dw, float* db) {
  const kernels::TapGemmFn block_fn = kernels::kernel_table().f32_conv_weight_grad_taps.fn;
  const std::int64_t C = s.in_channels, K = s.out_channels, H = s.height, W = s.width;
  const std::int64_t KH = s.kernel_h, KW = s.kernel_w, OH = s.out_height(), OW = s.out_width();
  const std::int64_t taps = KH * KW, tiles = K / kColumns;
  int threads = compute_threads();
  // Threads split the images first: each reads its own share of x and dy from memory once. Fewer
  // images than threads split the channel tiles as well.
  const std::int64_t groups = std::clamp<std::int64_t>(threads, 1, std::max<std::int64_t>(1, s.batch));
  const std::int64_t tile_parts = std::clamp<std::int64_t>((threads + groups - 1) / groups, 1, tiles);
  const std::int64_t items = groups * tile_parts;
  threads = static_cast<int>(std::min<std::int64_t>(threads, items));
  const std::int64_t tile_floats = taps * C * kColumns;  // one tile's dW^T: [tap][c][64]
  const std::int64_t group_floats = tiles * tile_floats;
  const std::int64_t block_rows = std::clamp<std::int64_t>(kBlockPixels / OW, 1, OH);
  const std::int64_t block_pixels = block_rows * OW;
  // A block's input rows, padded: padded_row floats each, the columns [-pad_w, padded_w - pad_w)
  // of the input, of which `copied` from column `left - pad_w` on are inside it.
  const std::int64_t padded_w = (OW - 1) * s.stride_w + KW, padded_row = padded_w * C;
  const std::int64_t left = std::min(s.pad_w, padded_w);
  const std::int64_t copied =
      std::clamp<std::int64_t>(std::min(W, padded_w - s.pad_w) - (left - s.pad_w), 0, padded_w - left);
  const std::int64_t max_in_rows = (block_rows - 1) * s.stride_h + KH;
  const bool in_place = s.pad_h == 0 && s.pad_w == 0;
  const std::int64_t row_floats = in_place ? W * C : padded_row;  // between the rows read
  const std::int64_t chunks = (KW * C + kMaxRows - 1) / kMaxRows;

  thread_local AlignedBuffer gradient_buffer;
  // The bias sums in double: thousands of pixels per channel (2352 in a test) summed in float drifted
  // by 1e-4 of their size.
  thread_local std::vector<double> bias_buffer;
  float* grad = gradient_buffer.get(static_cast<std::size_t>(groups * group_floats));
  if (bias_buffer.size() < static_cast<std::size_t>(groups * K))
    bias_buffer.resize(static_cast<std::size_t>(groups * K));
  double* bias = bias_buffer.data();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t item = 0; item < items; ++item) {
    const std::int64_t group = item / tile_parts, part = item % tile_parts;
    const std::int64_t n0 = s.batch * group / groups, n1 = s.batch * (group + 1) / groups;
    const std::int64_t my_tiles =
        (tiles - part + tile_parts - 1) / tile_parts;  // part, part + tile_parts, ...
    float* group_grad = grad + group * group_floats;
    double* group_bias = bias + group * K;
    for (std::int64_t i = 0; i < my_tiles; ++i) {
      const std::int64_t tile = part + i * tile_parts;
      std::fill(group_grad + tile * tile_floats, group_grad + (tile + 1) * tile_floats, 0.0f);
      std::fill(group_bias + tile * kColumns, group_bias + (tile + 1) * kColumns, 0.0);
    }
    thread_local AlignedBuffer panel_buffer, padded_buffer;
    float* panel = panel_buffer.get(static_cast<std::size_t>(my_tiles * block_pixels * kColumns));
    float* padded =
        in_place ? nullptr : padded_buffer.get(static_cast<std::size_t>(max_in_rows * padded_row));
    for (std::int64_t n = n0; n < n1; ++n)
      for (std::int64_t oh0 = 0; oh0 < OH; oh0 += block_rows) {
        const std::int64_t oh1 = std::min(OH, oh0 + block_rows), pixels = (oh1 - oh0) * OW;
        const std::int64_t in_rows = (oh1 - oh0 - 1) * s.stride_h + KH;
        // The block's dY, each of this item's tiles' 64 channels contiguous ([tile][pixel][64]),
        // and the bias sums on the way when asked for.
        const float* dy_block = dy + (n * OH + oh0) * OW * K;
        for (std::int64_t p = 0; p < pixels; ++p)
          for (std::int64_t i = 0; i < my_tiles; ++i) {
            const std::int64_t tile = part + i * tile_parts;
            const float* src = dy_block + p * K + tile * kColumns;
            double* sums = group_bias + tile * kColumns;
            std::memcpy(panel + (i * block_pixels + p) * kColumns, src, kColumns * sizeof(float));
            if (db)
              for (std::int64_t j = 0; j < kColumns; ++j) sums[j] += src[j];
          }
        // The block's input rows, zero-padded: every output pixel then reads all KW taps of a
        // kernel row, and for one pixel those are KW * C consecutive floats -- a kernel row's
        // taps and channels are one run of block rows, [kw][c] as dW^T orders them. Unpadded
        // layers (1x1/2) read x where it is: their taps never leave the input.
        const float* rows_in = in_place ? x + (n * H + oh0 * s.stride_h) * W * C : padded;
        for (std::int64_t r = 0; r < (in_place ? 0 : in_rows); ++r) {
          float* dst = padded + r * padded_row;
          const std::int64_t ih = oh0 * s.stride_h - s.pad_h + r;
          if (ih < 0 || ih >= H) {
            std::fill(dst, dst + padded_row, 0.0f);
            continue;
          }
          const float* src = x + (n * H + ih) * W * C;
          std::fill(dst, dst + left * C, 0.0f);
          std::memcpy(dst + left * C, src + (left - s.pad_w) * C,
                      static_cast<std::size_t>(copied * C) * sizeof(float));
          std::fill(dst + (left + copied) * C, dst + padded_row, 0.0f);
        }
        // The next block's dY is fetched a few lines per call while this block computes, so that
        // the copy above finds it in cache: 1-3% faster than without, with and without it
        // alternating (layer2.0, layer3.0 and the stem, 1 thread).
        const bool last = n + 1 == n1 && oh1 == OH;
        const char* next = reinterpret_cast<const char*>(last ? dy_block : dy_block + pixels * K);
        const std::int64_t next_lines =
            last ? 0 : std::min(block_pixels, (n1 * OH - n * OH - oh1) * OW) * K / 16;
        const std::int64_t per_call = next_lines / (my_tiles * KH * chunks) + 1;
        std::int64_t issued = 0;
        kernels::TapGemmArgs a;
        a.x_step = s.stride_w * C, a.x_row = s.stride_h * row_floats;
        a.dy_step = kColumns, a.dy_row = OW * kColumns;
        a.pixels = OW, a.row_count = oh1 - oh0;
        for (std::int64_t i = 0; i < my_tiles; ++i) {
          float* c = group_grad + (part + i * tile_parts) * tile_floats;
          a.dy = panel + i * block_pixels * kColumns;
          for (std::int64_t kh = 0; kh < KH; ++kh)
            for (std::int64_t r0 = 0; r0 < KW * C; r0 += kMaxRows) {
              for (std::int64_t l = 0; l < per_call && issued < next_lines; ++l, ++issued)
                __builtin_prefetch(next + issued * 64);
              a.x = rows_in + kh * row_floats + r0;
              a.rows = static_cast<int>(std::min(kMaxRows, KW * C - r0));
              a.c = c + (kh * KW * C + r0) * kColumns;
              block_fn(a);
            }
        }
      }
  }
  // [group][tile][tap][c][64] -> OIHW, summing the groups: per (tile, input channel), the taps'
  // 64-lane rows are read whole, and the 64 output channels' runs of taps filled a tap at a time
  // (64 lines, in L1 throughout).
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t tc = 0; tc < tiles * C; ++tc) {
    const std::int64_t tile = tc / C, ci = tc % C;
    float* out = dw + tile * kColumns * C * taps + ci * taps;
    for (std::int64_t t = 0; t < taps; ++t) {
      float sum[kColumns];
      const float* src = grad + tile * tile_floats + (t * C + ci) * kColumns;
      std::memcpy(sum, src, sizeof(sum));
      for (std::int64_t g = 1; g < groups; ++g)
        for (std::int64_t lane = 0; lane < kColumns; ++lane) sum[lane] += src[g * group_floats + lane];
      for (std::int64_t lane = 0; lane < kColumns; ++lane) out[lane * C * taps + t] = sum[lane];
    }
  }
  if (db)
    for (std::int64_t k = 0; k < K; ++k) {
      double sum = 0.0;
      for (std::int64_t g = 0; g < groups; ++g) sum += bias[g * K + k];
      db[k] = static_cast<float>(sum);
    }
}

}  // namespace cpudl::conv
