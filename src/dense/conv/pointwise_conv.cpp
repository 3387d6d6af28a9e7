// The pointwise convolutions' driver (see the header). Threads take blocks of about 48 pixels;
// a block's pixels (48 x C floats, in L1 or L2) pass under each 64-column weight panel in turn,
// so every pixel is read from memory once and every output line written once.
#include "dense/conv/pointwise_conv.h"

#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::conv {

namespace {

constexpr std::int64_t kColumns = kernels::kPointwiseColumns, kMaxRows = kernels::kPointwiseMaxRows;
constexpr std::int64_t kBlockPixels = 48;

bool enabled() {
  static const bool on = switched_on("CPUDL_POINTWISE");
  return on;
}

bool pointwise(const dense::ConvShape& s) {
  return enabled() && s.layout == dense::ActivationLayout::nhwc && s.kernel_h == 1 && s.kernel_w == 1 &&
         s.pad_h == 0 && s.pad_w == 0 && s.dilation_h == 1 && s.dilation_w == 1 && s.groups == 1 &&
         s.out_height() > 0 && s.out_width() > 0;
}

// w ([out][in]) as panels of 64 columns, [cols / 64][rows][64]: forward packs W^T (rows: input
// channels; each panel a transposed block of 64 output channels, by the kernel table's
// transpose), backward-data W itself (rows: output channels).
const float* pack_panels(const float* w, std::int64_t rows, std::int64_t cols, bool transpose) {
  thread_local AlignedBuffer buffer;
  float* panels = buffer.get(static_cast<std::size_t>(rows * cols));
  const auto transpose_fn = kernels::kernel_table().f32_transpose.fn;
  for (std::int64_t q = 0; q < cols / kColumns; ++q) {
    float* panel = panels + q * rows * kColumns;
    if (transpose)
      transpose_fn(w + q * kColumns * rows, kColumns, static_cast<std::size_t>(rows),
                   static_cast<std::size_t>(rows), panel, kColumns);
    else
      for (std::int64_t r = 0; r < rows; ++r)
        std::copy_n(w + r * cols + q * kColumns, kColumns, panel + r * kColumns);
  }
  return panels;
}

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

}  // namespace

bool pointwise_conv_forward_applies(const dense::ConvShape& s) {
  return pointwise(s) && s.out_channels % kColumns == 0;
}
bool pointwise_conv_backward_data_applies(const dense::ConvShape& s) {
  return pointwise(s) && s.in_channels % kColumns == 0;
}

// Where the list prefers it (the measurements, time ratios against oneDNN on ResNet-18's
// shortcuts with cold and warm caches, are in docs/ARCHITECTURE.md, "Pointwise convolutions"):
// strided layers on AVX-512; the forward only with weights up to 128 KB, since a 64-column panel
// of more rows no longer stays in L1 beside the pixels; the backward-data pass, whose panels are
// the weights' own rows, at every size. Stride-1 layers ran within the noise of oneDNN and stay
// there; the AVX2 tile is untimed against oneDNN.
namespace {
bool pointwise_preferred(const dense::ConvShape& s) {
  return kernels::kernel_table().f32_pointwise_tile.level == IsaLevel::avx512 &&
         (s.stride_h > 1 || s.stride_w > 1);
}
constexpr std::int64_t kForwardWeightLimit = 32 * 1024;  // floats: 128 KB
}  // namespace

bool pointwise_conv_forward_preferred(const dense::ConvShape& s) {
  return pointwise_conv_forward_applies(s) && pointwise_preferred(s) &&
         s.in_channels * s.out_channels <= kForwardWeightLimit;
}
bool pointwise_conv_backward_data_preferred(const dense::ConvShape& s) {
  return pointwise_conv_backward_data_applies(s) && pointwise_preferred(s);
}

void pointwise_conv_forward(const dense::ConvShape& s, const float* x, const float* w, const float* bias,
                            float* y) {
  const kernels::PointwiseTileFn tile = kernels::kernel_table().f32_pointwise_tile.fn;
  const std::int64_t C = s.in_channels, K = s.out_channels, H = s.height, W = s.width;
  const std::int64_t OH = s.out_height(), OW = s.out_width(), pixels = s.batch * OH * OW;
  const int threads = compute_threads();
  const float* panels = pack_panels(w, C, K, true);
  const bool stream =
      aligned(y) && static_cast<std::size_t>(pixels * K) * sizeof(float) >= kernels::g_streaming_store_bytes;
#pragma omp parallel num_threads(threads)
  {
    // Each thread takes a run of consecutive blocks, so that it can fetch the next one's pixels
    // while this one computes: a pixel-strided read defeats the hardware prefetchers, and each
    // tile would otherwise wait on its rows' misses.
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
    const std::int64_t begin = pixels * me / team / kBlockPixels * kBlockPixels;
    const std::int64_t end = me + 1 == team ? pixels : pixels * (me + 1) / team / kBlockPixels * kBlockPixels;
    const float* rows[2][kBlockPixels];
    std::int64_t n = begin / (OH * OW), oh = begin / OW % OH, ow = begin % OW;
    auto next_rows = [&](const float** out, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) {
        out[i] = x + ((n * H + oh * s.stride_h) * W + ow * s.stride_w) * C;
        if (++ow < OW) continue;
        ow = 0;
        if (++oh < OH) continue;
        oh = 0;
        ++n;
      }
    };
    next_rows(rows[0], std::min(kBlockPixels, end - begin));
    const std::int64_t panels_k = K / kColumns;
    for (std::int64_t first = begin, cur = 0; first < end; first += kBlockPixels, cur ^= 1) {
      const std::int64_t count = std::min(kBlockPixels, end - first);
      const std::int64_t next_count = std::min(kBlockPixels, end - first - count);
      next_rows(rows[cur ^ 1], next_count);
      for (std::int64_t q = 0; q < panels_k; ++q)
        for (std::int64_t i = 0; i < count; i += kMaxRows) {
          float* out[kMaxRows];
          const int tile_rows = static_cast<int>(std::min(kMaxRows, count - i));
          for (int r = 0; r < tile_rows; ++r) out[r] = y + (first + i + r) * K + q * kColumns;
          kernels::PointwiseTileArgs args{};
          args.k = C;
          args.a = rows[cur] + i;
          args.b = panels + q * C * kColumns;
          args.bias = bias ? bias + q * kColumns : nullptr;
          args.c = out;
          args.rows = tile_rows;
          args.stream = stream;
          if (q + 1 == panels_k && i < next_count) {  // the next block's rows, while the last panel runs
            args.prefetch = rows[cur ^ 1] + i;
            args.prefetch_rows = static_cast<int>(std::min(kMaxRows, next_count - i));
          }
          tile(args);
        }
    }
    if (stream) _mm_sfence();  // each thread orders its own non-temporal stores
  }
}

void pointwise_conv_backward_data(const dense::ConvShape& s, const float* dy, const float* w, float* dx) {
  const kernels::PointwiseTileFn tile = kernels::kernel_table().f32_pointwise_tile.fn;
  const std::int64_t C = s.in_channels, K = s.out_channels, H = s.height, W = s.width;
  const std::int64_t OH = s.out_height(), OW = s.out_width(), SH = s.stride_h, SW = s.stride_w;
  const int threads = compute_threads();
  const float* panels = pack_panels(w, K, C, false);
  const bool stream = aligned(dx) && static_cast<std::size_t>(s.batch * H * W * C) * sizeof(float) >=
                                         kernels::g_streaming_store_bytes;
  // Blocks of whole gradient rows (one output row of dy: its pixels' dx row, the skipped pixels
  // after each and the skipped rows below), about kBlockPixels pixels.
  const std::int64_t block_rows = std::clamp<std::int64_t>(kBlockPixels / OW, 1, OH);
  const std::int64_t row_blocks = (OH + block_rows - 1) / block_rows, blocks = s.batch * row_blocks;
  const int last_gap = static_cast<int>(W - 1 - (OW - 1) * SW);
#pragma omp parallel num_threads(threads)
  {
    // A run of consecutive blocks per thread, the next block's gradient rows fetched during this
    // one (as in the forward pass).
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
    const std::int64_t begin = blocks * me / team, end = blocks * (me + 1) / team;
    const std::size_t most = static_cast<std::size_t>(block_rows * OW);
    std::vector<const float*> rows[2] = {std::vector<const float*>(most), std::vector<const float*>(most)};
    std::vector<float*> outs(most);
    std::vector<int> gaps(most);
    struct Region {
      float* at;
      std::int64_t floats;
    };
    std::vector<Region> regions(static_cast<std::size_t>(block_rows));
    auto block_pixels = [&](std::int64_t blk) {
      const std::int64_t oh0 = blk % row_blocks * block_rows;
      return (std::min(OH, oh0 + block_rows) - oh0) * OW;
    };
    auto gradient_rows = [&](std::int64_t blk, const float** out) {
      const std::int64_t n = blk / row_blocks, oh0 = blk % row_blocks * block_rows;
      const float* first = dy + (n * OH + oh0) * OW * K;
      for (std::int64_t i = 0, count = block_pixels(blk); i < count; ++i) out[i] = first + i * K;
    };
    if (begin < end) gradient_rows(begin, rows[0].data());
    for (std::int64_t blk = begin, cur = 0; blk < end; ++blk, cur ^= 1) {
      const std::int64_t n = blk / row_blocks, oh0 = blk % row_blocks * block_rows;
      const std::int64_t oh1 = std::min(OH, oh0 + block_rows), count = block_pixels(blk);
      const std::int64_t next_count = blk + 1 < end ? block_pixels(blk + 1) : 0;
      if (next_count) gradient_rows(blk + 1, rows[cur ^ 1].data());
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t oh = oh0 + i / OW, ow = i % OW;
        outs[i] = dx + ((n * H + oh * SH) * W + ow * SW) * C;
        gaps[i] = ow + 1 < OW ? static_cast<int>(SW - 1) : last_gap;
      }
      // The rows each gradient row skips (those below it up to the next one; to the image's end
      // after the last), cleared a share at a time by the block's tiles.
      std::int64_t zero_total = 0;
      std::size_t region_count = 0;
      for (std::int64_t oh = oh0; oh < oh1; ++oh) {
        const std::int64_t h0 = oh * SH + 1, h1 = oh + 1 < OH ? (oh + 1) * SH : H;
        if (h1 > h0) {
          regions[region_count++] = {dx + (n * H + h0) * W * C, (h1 - h0) * W * C};
          zero_total += (h1 - h0) * W * C;
        }
      }
      const std::int64_t tiles = (count + kMaxRows - 1) / kMaxRows, calls = C / kColumns * tiles;
      const std::int64_t share = (zero_total / calls + 16) / 16 * 16;
      std::size_t region = 0;
      std::int64_t offset = 0;
      for (std::int64_t q = 0; q < C / kColumns; ++q)
        for (std::int64_t i = 0; i < count; i += kMaxRows) {
          float* out[kMaxRows];
          const int tile_rows = static_cast<int>(std::min(kMaxRows, count - i));
          for (int r = 0; r < tile_rows; ++r) out[r] = outs[i + r] + q * kColumns;
          kernels::PointwiseTileArgs args{};
          args.k = K;
          args.a = rows[cur].data() + i;
          args.b = panels + q * K * kColumns;
          args.c = out;
          args.rows = tile_rows;
          args.gaps = gaps.data() + i;
          args.gap_stride = C;
          args.stream = stream;
          if (region < region_count) {
            args.zero = regions[region].at + offset;
            args.zero_floats = std::min(share, regions[region].floats - offset);
            if ((offset += args.zero_floats) == regions[region].floats) ++region, offset = 0;
          }
          if (q + 1 == C / kColumns && i < next_count) {
            args.prefetch = rows[cur ^ 1].data() + i;
            args.prefetch_rows = static_cast<int>(std::min(kMaxRows, next_count - i));
          }
          tile(args);
        }
      for (; region < region_count; ++region, offset = 0) {  // what the shares left
        kernels::PointwiseTileArgs zero{};
        zero.zero = regions[region].at + offset;
        zero.zero_floats = regions[region].floats - offset;
        zero.stream = stream;
        tile(zero);
      }
    }
    if (stream) _mm_sfence();
  }
}

}  // namespace cpudl::conv
