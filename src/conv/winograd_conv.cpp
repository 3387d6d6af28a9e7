// The Winograd convolution's driver: weight transform (in double, once), the schedule of tile
// blocks over the threads, and the three kernels of the dispatch table per block.
#include "conv/winograd_conv.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "kernels/winograd/winograd.h"
#include "runtime/aligned_buffer.h"
#include "runtime/parallel.h"

namespace cpudl::conv {
namespace {

constexpr std::size_t kPositions = kernels::kWinogradPositions, kColumns = kernels::kWinogradGemmColumns;

// G of F(4x4, 3x3): the 6 x 3 matrix that interpolates a 3-tap filter at 0, 1, -1, 2, -2, inf.
constexpr double kG[6][3] = {{1.0 / 4, 0, 0},
                             {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                             {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                             {1.0 / 24, 1.0 / 12, 1.0 / 6},
                             {1.0 / 24, -1.0 / 12, 1.0 / 6},
                             {0, 0, 1}};

std::size_t tiles_of(std::int64_t out) { return static_cast<std::size_t>((out + 3) / 4); }

// Transformed weights in bytes: 36 positions x C x K floats.
double transformed_bytes(const WinogradConvShape& s) {
  return static_cast<double>(kPositions) * static_cast<double>(s.in_channels * s.out_channels) * 4.0;
}

struct Schedule {
  std::size_t tiles_per_block, blocks, k_parts;
};

// Blocks of 24 tiles: their transformed input and products (36 x 24 x (C + K) floats, 0.4-1.7 MB
// for 64-256 channels) stay in L2 and the near L3, and each pass over the transformed weights
// feeds 12 FLOPs per byte (measured at 64-256 channels: 24 tiles gave 79-83% of the FMA roof in
// the GEMM, 48 tiles 70-75%). Weights beyond 16 MB (512 -> 512 channels: 38 MB) come from
// memory, so there one block takes as many tiles as 12 MB of buffers allow and the weights are
// read once (76% of the roof at batch 16 against 53% with blocks of 36).
//
// With several threads, whole blocks go to each thread when they divide evenly (or are many);
// otherwise, or when the weights are that large, the threads split the output channels instead
// (each reads its share of the weights once; the input transform is then repeated, which is
// cheap). Batch 1 at 28x28 has 49 tiles: 3 blocks would leave one thread a third idle.
Schedule schedule(const WinogradConvShape& s, std::size_t tiles, int threads) {
  const bool huge_weights = transformed_bytes(s) > 16e6;
  const auto per_tile_bytes = static_cast<std::size_t>(kPositions * 4 * (s.in_channels + s.out_channels));
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

}  // namespace

bool winograd_worthwhile(const WinogradConvShape& s) {
  static const bool enabled = [] {
    const char* value = std::getenv("CPUDL_WINOGRAD");
    return value == nullptr || std::string(value) != "0";
  }();
  if (!enabled) return false;
  if (s.in_channels % 8 != 0 || s.out_channels % static_cast<std::int64_t>(kColumns) != 0 ||
      s.in_channels < 16)
    return false;
  const std::int64_t out_h = s.height + 2 * s.pad - 2, out_w = s.width + 2 * s.pad - 2;
  if (out_h < 1 || out_w < 1) return false;
  const double tiles = static_cast<double>(s.batch) * static_cast<double>(tiles_of(out_h) * tiles_of(out_w));
  return tiles >= 8;
}

WinogradConv::WinogradConv(const WinogradConvShape& shape, const float* weights) : shape_(shape) {
  const auto C = static_cast<std::size_t>(shape.in_channels),
             K = static_cast<std::size_t>(shape.out_channels);
  if (C % 8 != 0 || K % kColumns != 0 || shape.pad < 0 || (shape.block != 8 && shape.block != 16))
    throw Error("Winograd convolution: " + std::to_string(C) + " -> " + std::to_string(K) +
                " channels (need multiples of 8 and 16) or padding " + std::to_string(shape.pad) +
                " not supported");
  const std::int64_t out_h = shape.height + 2 * shape.pad - 2, out_w = shape.width + 2 * shape.pad - 2;
  tiles_ = {C,
            K,
            static_cast<std::size_t>(shape.height),
            static_cast<std::size_t>(shape.width),
            static_cast<std::size_t>(out_h),
            static_cast<std::size_t>(out_w),
            static_cast<std::size_t>(shape.pad),
            static_cast<std::size_t>(shape.block),
            tiles_of(out_h),
            tiles_of(out_w)};
  // U[p][k / 16][c][k % 16] = (G g G^T)[p / 6][p % 6] for filter g = weights[k][c].
  weights_storage_.assign(kPositions * C * K + 16, 0.0f);
  float* u = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(weights_storage_.data()) + 63) &
                                      ~std::uintptr_t{63});
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t c = 0; c < C; ++c) {
      const float* g = weights + (k * C + c) * 9;
      double gg[6][3];  // G g
      for (int r = 0; r < 6; ++r)
        for (int j = 0; j < 3; ++j) gg[r][j] = kG[r][0] * g[j] + kG[r][1] * g[3 + j] + kG[r][2] * g[6 + j];
      for (int r = 0; r < 6; ++r)
        for (int q = 0; q < 6; ++q) {
          const double value = gg[r][0] * kG[q][0] + gg[r][1] * kG[q][1] + gg[r][2] * kG[q][2];
          u[(static_cast<std::size_t>(r * 6 + q) * K + k / kColumns * kColumns) * C + c * kColumns +
            k % kColumns] = static_cast<float>(value);
        }
    }
  weights_ = u;
}

void WinogradConv::forward(const float* x, const float* bias, const float* residual, float lo, float hi,
                           float* y, int threads) const {
  const auto& table = kernels::kernel_table();
  const auto input = table.f32_winograd_input_4x3.fn;
  const auto gemm = table.f32_winograd_gemm.fn;
  const auto output = table.f32_winograd_output_4x3.fn;
  const std::size_t C = tiles_.channels, K = tiles_.out_channels;
  const std::size_t tiles = static_cast<std::size_t>(shape_.batch) * tiles_.tiles_h * tiles_.tiles_w;
  if (threads <= 0) threads = runtime().threads.threads;
  const Schedule plan = schedule(shape_, tiles, threads);
  const kernels::WinogradEpilogue epilogue{bias, residual, lo, hi};
  const float* u = weights_;
  const kernels::WinogradShape& geometry = tiles_;
  parallel_for(plan.blocks * plan.k_parts, 1, threads, [&](std::size_t begin, std::size_t end) {
    thread_local AlignedBuffer v_buffer, m_buffer;
    float* v = v_buffer.get(kPositions * (plan.tiles_per_block * C + kernels::kWinogradPositionPad));
    float* m = m_buffer.get(kPositions * (plan.tiles_per_block * K + kernels::kWinogradPositionPad));
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
      gemm(v, u, m, count, plan.tiles_per_block, C, K, k_begin, k_end);
      output(geometry, m, first, count, plan.tiles_per_block, k_begin, k_end, epilogue, y);
    }
  });
}

}  // namespace cpudl::conv
