// The Winograd convolution's driver: the choice of tile size, the weight transform (in double,
// once), the schedule of tile blocks over the threads, and the kernels of the dispatch table per
// block.
#include "dense/conv/winograd_conv.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "kernels/dispatch.h"
#include "kernels/winograd/winograd.h"
#include "runtime/aligned_buffer.h"
#include "runtime/parallel.h"

namespace cpudl::conv {
namespace {

constexpr std::size_t kColumns = kernels::kWinogradGemmColumns;

std::size_t tiles_of(std::int64_t out, std::int64_t tile) {
  return static_cast<std::size_t>((out + tile - 1) / tile);
}
std::size_t positions_of(std::int64_t tile) { return static_cast<std::size_t>((tile + 2) * (tile + 2)); }

// Transformed weights in bytes: positions x C x K floats.
double transformed_bytes(const WinogradConvShape& s) {
  return static_cast<double>(positions_of(s.tile)) * static_cast<double>(s.in_channels * s.out_channels) *
         4.0;
}

struct Schedule {
  std::size_t tiles_per_block, blocks, k_parts;
};

// Blocks of 24 tiles: their transformed input and products (36 x 24 x (C + K) floats with
// F(4x4), 0.4-1.7 MB for 64-256 channels) stay in L2 and the near L3, and each pass over the
// transformed weights feeds 12 FLOPs per byte (measured at 64-256 channels: 24 tiles gave 79-83%
// of the FMA roof in the GEMM, 48 tiles 70-75%). Weights beyond 16 MB (512 -> 512 channels: 38
// MB) come from memory, so there one block takes as many tiles as 12 MB of buffers allow and the
// weights are read once (76% of the roof at batch 16 against 53% with blocks of 36).
//
// With several threads, whole blocks go to each thread when they divide evenly (or are many);
// otherwise, or when the weights are that large, the threads split the output channels instead
// (each reads its share of the weights once; the input transform is then repeated, which is
// cheap). Batch 1 at 28x28 has 49 tiles: 3 blocks would leave one thread a third idle.
Schedule schedule(const WinogradConvShape& s, std::size_t tiles, int threads) {
  const bool huge_weights = transformed_bytes(s) > 16e6;
  const auto per_tile_bytes = static_cast<std::size_t>(
      positions_of(s.tile) * 4 * static_cast<std::size_t>(s.in_channels + s.out_channels));
  std::size_t block = huge_weights ? std::max<std::size_t>(24, (std::size_t{12} << 20) / per_tile_bytes) : 24;
  std::size_t blocks = (tiles + block - 1) / block;
  const auto workers = static_cast<std::size_t>(std::max(1, threads));
  const std::size_t panels = static_cast<std::size_t>(s.out_channels) / kColumns;
  std::size_t k_parts = 1;
  if (workers > 1 && panels >= workers && (huge_weights || (blocks % workers != 0 && blocks < 4 * workers)))
    k_parts = workers;
  else
    blocks = (blocks + workers - 1) / workers * workers;  // whole rounds over the threads
  block = (tiles + blocks - 1) / blocks;
  const std::size_t whole = (block + 5) / 6 * 6;  // whole 6-row GEMM tiles, if the count stays
  if ((tiles + whole - 1) / whole == blocks) block = whole;
  blocks = (tiles + block - 1) / block;
  return {block, blocks, k_parts};
}

// The kernels' view of a convolution: sizes, the layouts' blocks (channels-last: one block of all
// channels), the tile grid.
kernels::WinogradShape geometry(const WinogradConvShape& shape) {
  const auto C = static_cast<std::size_t>(shape.in_channels),
             K = static_cast<std::size_t>(shape.out_channels);
  const std::int64_t out_h = shape.height + 2 * shape.pad - 2, out_w = shape.width + 2 * shape.pad - 2;
  const bool channels_last = shape.block == 0;
  return {C,
          K,
          static_cast<std::size_t>(shape.height),
          static_cast<std::size_t>(shape.width),
          static_cast<std::size_t>(out_h),
          static_cast<std::size_t>(out_w),
          static_cast<std::size_t>(shape.pad),
          channels_last ? C : static_cast<std::size_t>(shape.block),
          channels_last ? K : static_cast<std::size_t>(shape.block),
          tiles_of(out_h, shape.tile),
          tiles_of(out_w, shape.tile)};
}

}  // namespace

int winograd_tile(const WinogradConvShape& s) {
  static const bool enabled = switched_on("CPUDL_WINOGRAD");
  if (!enabled) return 0;
  if (s.in_channels % 8 != 0 || s.out_channels % static_cast<std::int64_t>(kColumns) != 0 ||
      s.in_channels < 16)
    return 0;
  const std::int64_t out_h = s.height + 2 * s.pad - 2, out_w = s.width + 2 * s.pad - 2;
  if (out_h < 1 || out_w < 1) return 0;
  const double tiles =
      static_cast<double>(s.batch) * static_cast<double>(tiles_of(out_h, 4) * tiles_of(out_w, 4));
  return tiles >= 8 ? 4 : 2;
}

std::optional<WinogradConvShape> winograd_shape(const dense::ConvShape& s) {
  if (s.groups != 1 || s.kernel_h != 3 || s.kernel_w != 3 || s.stride_h != 1 || s.stride_w != 1 ||
      s.dilation_h != 1 || s.dilation_w != 1 || s.pad_h != s.pad_w ||
      s.layout == dense::ActivationLayout::nchw)
    return std::nullopt;
  const bool channels_last = s.layout == dense::ActivationLayout::nhwc;
  WinogradConvShape w{s.batch,
                      s.in_channels,
                      s.height,
                      s.width,
                      s.out_channels,
                      s.pad_h,
                      channels_last ? 0 : onednn::blocked_layout_channels()};
  w.tile = winograd_tile(w);
  if (w.tile == 0) return std::nullopt;
  return w;
}

std::optional<WinogradConvShape> winograd_backward_data_shape(const dense::ConvShape& s) {
  if (s.kernel_h != 3 || s.kernel_w != 3 || s.pad_h > 2) return std::nullopt;
  dense::ConvShape backward = s;
  backward.in_channels = s.out_channels, backward.out_channels = s.in_channels;
  backward.height = s.out_height(), backward.width = s.out_width();
  backward.pad_h = 2 - s.pad_h, backward.pad_w = 2 - s.pad_w;
  return winograd_shape(backward);
}

std::optional<WinogradConvShape> winograd_training_shape(const dense::ConvShape& s, WinogradPass pass) {
  constexpr std::int64_t kMinTiles = 48;
  if (s.layout != dense::ActivationLayout::nhwc) return std::nullopt;
  auto shape = pass == WinogradPass::forward ? winograd_shape(s) : winograd_backward_data_shape(s);
  if (!shape) return std::nullopt;
  const std::int64_t out_h = shape->height + 2 * shape->pad - 2, out_w = shape->width + 2 * shape->pad - 2;
  const std::int64_t tiles =
      shape->batch * ((out_h + shape->tile - 1) / shape->tile) * ((out_w + shape->tile - 1) / shape->tile);
  if (tiles < kMinTiles) return std::nullopt;
  return shape;
}

void winograd_convolve(const WinogradConvShape& shape, const float* weights, WinogradPass pass,
                       const float* x, const float* bias, float lo, float hi, float* y) {
  thread_local AlignedBuffer storage;
  const WinogradConv conv(shape, weights, pass, storage.get(WinogradConv::transformed_floats(shape)));
  conv.forward(x, bias, nullptr, lo, hi, y);
}

// One pass per block of tiles: the input and gradient transforms, then the per-position products
// added into dU (C x K per position); dW = G^T dU G at the end. Blocks take as many tiles as 8 MB
// of transformed values allow, so dU (up to 38 MB at 512 channels) is read and written once per
// block, not per 24 tiles. With several threads, small dU (up to 4 MB: 64-128 channels) splits
// the tiles: each thread sums its share into its own dU and dW, added up at the end. Larger dU
// splits the output channels: each thread owns its share of dU and dW and transforms the whole
// input, which at 64 channels cost as much as the products (2 threads, ResNet-18's 56x56 layer:
// 8.2 ms, against 9.5 for oneDNN).
void winograd_backward_weights(const WinogradConvShape& shape, const float* x, const float* dy, float* dw,
                               float* db) {
  if (shape.tile != 4)
    throw Error("Winograd weight gradient: F(4x4, 3x3) only, tile " + std::to_string(shape.tile) +
                " requested");
  const auto& table = kernels::kernel_table();
  const kernels::WinogradShape g = geometry(shape);
  const std::size_t C = g.channels, K = g.out_channels, positions = kernels::kWinogradPositions;
  if (C % 8 != 0 || K % kColumns != 0)
    throw Error("Winograd weight gradient: " + std::to_string(C) + " -> " + std::to_string(K) +
                " channels (need multiples of 8 and 16)");
  const std::size_t tiles = static_cast<std::size_t>(shape.batch) * g.tiles_h * g.tiles_w;
  const std::size_t block = std::clamp<std::size_t>((std::size_t{8} << 20) / (positions * 4 * (C + K)), 24,
                                                    std::max<std::size_t>(tiles, 24));
  const int threads = compute_threads();
  const auto workers = static_cast<std::size_t>(std::max(1, threads));
  const std::size_t panels = K / kColumns, du_floats = positions * C * K, dw_floats = C * K * 9;
  const bool split_tiles = workers > 1 && du_floats * 4 <= (std::size_t{4} << 20) && tiles >= workers * 256;
  const std::size_t parts = split_tiles ? workers : std::min(workers, panels);
  // dU per part when the tiles are split (and the other parts' dW, added into dw at the end).
  thread_local AlignedBuffer du_buffer, dw_buffer;
  float* du_all = du_buffer.get(du_floats * (split_tiles ? parts : 1));
  float* dw_parts = split_tiles ? dw_buffer.get(dw_floats * (parts - 1)) : nullptr;
  // The bias gradient, per part: the transformed gradient's position (1, 1) is each tile's sum of
  // dy (row 1 of A^T is all ones), so db adds it up over the tiles, in double.
  std::vector<double> db_parts(db ? parts * K : 0, 0.0);
  parallel_for(parts, 1, threads, [&](std::size_t begin, std::size_t end) {
    thread_local AlignedBuffer v_buffer, m_buffer;
    float* v = v_buffer.get(positions * (block * C + kernels::kWinogradPositionPad));
    float* m = m_buffer.get(positions * (block * K + kernels::kWinogradPositionPad));
    for (std::size_t part = begin; part < end; ++part) {
      const std::size_t k_begin = split_tiles ? 0 : panels * part / parts * kColumns;
      const std::size_t k_end = split_tiles ? K : panels * (part + 1) / parts * kColumns;
      const std::size_t tile_begin = split_tiles ? tiles * part / parts : 0;
      const std::size_t tile_end = split_tiles ? tiles * (part + 1) / parts : tiles;
      float* du = du_all + (split_tiles ? part * du_floats : 0);
      for (std::size_t first = tile_begin; first < tile_end; first += block) {
        const std::size_t count = std::min(block, tile_end - first);
        table.f32_winograd_input_4x3.fn(g, x, first, count, v, block);
        table.f32_winograd_output_grad_4x3.fn(g, dy, first, count, block, k_begin, k_end, m);
        table.f32_winograd_gemm_weights.fn(v, m, du, count, block, C, K, k_begin, k_end, first > tile_begin);
        if (db) {
          const float* sums = m + 7 * (block * K + kernels::kWinogradPositionPad);
          double* part_db = db_parts.data() + part * K;
          for (std::size_t k = k_begin; k < k_end; k += 8)
            for (std::size_t i = 0; i < count; ++i)
              for (std::size_t l = 0; l < 8; ++l) part_db[k + l] += sums[(k / 8 * block + i) * 8 + l];
        }
      }
      table.f32_winograd_weight_grad_4x3.fn(du, C, K, k_begin, k_end,
                                            split_tiles && part > 0 ? dw_parts + (part - 1) * dw_floats : dw);
    }
  });
  for (std::size_t part = 1; split_tiles && part < parts; ++part) {
    const float* other = dw_parts + (part - 1) * dw_floats;
    for (std::size_t i = 0; i < dw_floats; ++i) dw[i] += other[i];
  }
  for (std::size_t k = 0; db && k < K; ++k) {
    double sum = 0;
    for (std::size_t part = 0; part < parts; ++part) sum += db_parts[part * K + k];
    db[k] = static_cast<float>(sum);
  }
}

std::size_t WinogradConv::transformed_floats(const WinogradConvShape& shape) {
  return positions_of(shape.tile) * static_cast<std::size_t>(shape.in_channels * shape.out_channels);
}

WinogradConv::WinogradConv(const WinogradConvShape& shape, const float* weights, WinogradPass pass,
                           float* storage)
    : shape_(shape) {
  const auto C = static_cast<std::size_t>(shape.in_channels),
             K = static_cast<std::size_t>(shape.out_channels);
  if (C % 8 != 0 || K % kColumns != 0 || shape.pad < 0 ||
      (shape.block != 0 && shape.block != 8 && shape.block != 16) || (shape.tile != 2 && shape.tile != 4))
    throw Error("Winograd convolution: " + std::to_string(C) + " -> " + std::to_string(K) +
                " channels (need multiples of 8 and 16), padding " + std::to_string(shape.pad) + ", block " +
                std::to_string(shape.block) + " (0, 8 or 16) or tile " + std::to_string(shape.tile) +
                " (2 or 4) not supported");
  tiles_ = geometry(shape);
  float* u = storage;
  if (!u) {
    weights_storage_.assign(transformed_floats(shape) + 16, 0.0f);
    u = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(weights_storage_.data()) + 63) &
                                 ~std::uintptr_t{63});
  }
  // U[p][k / 16][c][k % 16] = (G g G^T)[p / T][p % T] for the filter g from input c to output k,
  // the threads taking panels of 16 output channels.
  const auto transform = shape.tile == 4 ? kernels::kernel_table().f32_winograd_weights_4x3.fn
                                         : kernels::kernel_table().f32_winograd_weights_2x3.fn;
  const bool backward_data = pass == WinogradPass::backward_data;
  const int threads = compute_threads();
  parallel_for(K / kColumns, 1, threads, [&](std::size_t begin, std::size_t end) {
    transform(weights, C, K, backward_data, begin * kColumns, end * kColumns, u);
  });
  weights_ = u;
}

void WinogradConv::forward(const float* x, const float* bias, const float* residual, float lo, float hi,
                           float* y) const {
  const auto& table = kernels::kernel_table();
  const bool large = shape_.tile == 4;
  const auto input = large ? table.f32_winograd_input_4x3.fn : table.f32_winograd_input_2x3.fn;
  const auto gemm = table.f32_winograd_gemm.fn;
  const auto output = large ? table.f32_winograd_output_4x3.fn : table.f32_winograd_output_2x3.fn;
  const std::size_t C = tiles_.channels, K = tiles_.out_channels, positions = positions_of(shape_.tile);
  const std::size_t tiles = static_cast<std::size_t>(shape_.batch) * tiles_.tiles_h * tiles_.tiles_w;
  const int threads = compute_threads();
  const Schedule plan = schedule(shape_, tiles, threads);
  const kernels::WinogradEpilogue epilogue{bias, residual, lo, hi};
  const float* u = weights_;
  const kernels::WinogradShape& geometry = tiles_;
  parallel_for(plan.blocks * plan.k_parts, 1, threads, [&](std::size_t begin, std::size_t end) {
    thread_local AlignedBuffer v_buffer, m_buffer;
    float* v = v_buffer.get(positions * (plan.tiles_per_block * C + kernels::kWinogradPositionPad));
    float* m = m_buffer.get(positions * (plan.tiles_per_block * K + kernels::kWinogradPositionPad));
    const std::size_t panels = K / kColumns;
    for (std::size_t item = begin; item < end; ++item) {
      // Part-major: a thread's contiguous items share one range of output channels.
      const std::size_t part = item / plan.blocks, block = item % plan.blocks;
      const std::size_t first = block * plan.tiles_per_block;
      const std::size_t count = std::min(plan.tiles_per_block, tiles - first);
      const std::size_t k_begin = panels * part / plan.k_parts * kColumns;
      const std::size_t k_end = panels * (part + 1) / plan.k_parts * kColumns;
      if (k_begin == k_end) continue;
      input(geometry, x, first, count, v, plan.tiles_per_block);
      gemm(positions, v, u, m, count, plan.tiles_per_block, C, K, k_begin, k_end);
      output(geometry, m, first, count, plan.tiles_per_block, k_begin, k_end, epilogue, y);
    }
  });
}

}  // namespace cpudl::conv
