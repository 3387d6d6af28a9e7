// Portable references of the Winograd kernels (winograd.h): the transforms written as products
// with the matrices B^T and A^T themselves, independent of the factored forms the ISA variants
// use, so that the tests compare two derivations. One body per transform, over the tile size.
#include <algorithm>

#include "kernels/winograd/winograd.h"

namespace cpudl::kernels {
namespace {

// F(4x4, 3x3): interpolation points 0, 1, -1, 2, -2, infinity.
constexpr float kBt4[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                              {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
constexpr float kAt4[4][6] = {
    {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
// G of F(4x4, 3x3) (6 x 3: a 3-tap filter interpolated at 0, 1, -1, 2, -2, infinity) and of
// F(2x2, 3x3) (4 x 3: at 0, 1, -1, infinity).
constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},
                              {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                              {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                              {1.0 / 24, 1.0 / 12, 1.0 / 6},
                              {1.0 / 24, -1.0 / 12, 1.0 / 6},
                              {0, 0, 1}};
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
// F(2x2, 3x3): points 0, 1, -1, infinity.
constexpr float kBt2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
constexpr float kAt2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

// Offset of channel c at pixel (h, w) of image n in the blocked layout.
std::size_t blocked_offset(std::size_t n, std::size_t channels, std::size_t height, std::size_t width,
                           std::size_t block, std::size_t c, std::size_t h, std::size_t w) {
  return n * channels * height * width + c / block * height * width * block + (h * width + w) * block +
         c % block;
}

// Offset of position p, channel c of tile i in the 8-channel-grouped form (kernel_types.h).
std::size_t grouped(std::size_t p, std::size_t c, std::size_t channels, std::size_t i, std::size_t rows) {
  return p * (channels * rows + kWinogradPositionPad) + (c / 8 * rows + i) * 8 + c % 8;
}

// M output pixels per tile side, T = M + 2 input pixels per patch side.
template <std::size_t M, std::size_t T>
void input_transform(const float (&bt)[T][T], const WinogradShape& s, const float* x, std::size_t first_tile,
                     std::size_t tiles, float* v, std::size_t v_rows) {
  const std::size_t per_image = s.tiles_h * s.tiles_w;
  for (std::size_t i = 0; i < tiles; ++i) {
    const std::size_t t = first_tile + i, n = t / per_image, ty = t % per_image / s.tiles_w,
                      tx = t % s.tiles_w;
    for (std::size_t c = 0; c < s.channels; ++c) {
      float d[T][T];
      for (std::size_t a = 0; a < T; ++a)
        for (std::size_t b = 0; b < T; ++b) {
          // Input row ty * M + a - pad, column tx * M + b - pad; outside the image is padding.
          const std::size_t h = ty * M + a, w = tx * M + b;
          const bool inside = h >= s.pad && h - s.pad < s.height && w >= s.pad && w - s.pad < s.width;
          d[a][b] =
              inside ? x[blocked_offset(n, s.channels, s.height, s.width, s.block, c, h - s.pad, w - s.pad)]
                     : 0.0f;
        }
      for (std::size_t r = 0; r < T; ++r)
        for (std::size_t q = 0; q < T; ++q) {
          float acc = 0.0f;
          for (std::size_t a = 0; a < T; ++a)
            for (std::size_t b = 0; b < T; ++b) acc += bt[r][a] * d[a][b] * bt[q][b];
          v[grouped(r * T + q, c, s.channels, i, v_rows)] = acc;
        }
    }
  }
}

template <std::size_t M, std::size_t T>
void output_transform(const float (&at)[M][T], const WinogradShape& s, const float* m, std::size_t first_tile,
                      std::size_t tiles, std::size_t v_rows, std::size_t k_begin, std::size_t k_end,
                      const WinogradEpilogue& e, float* y) {
  const std::size_t per_image = s.tiles_h * s.tiles_w, K = s.out_channels;
  for (std::size_t i = 0; i < tiles; ++i) {
    const std::size_t t = first_tile + i, n = t / per_image, ty = t % per_image / s.tiles_w,
                      tx = t % s.tiles_w;
    for (std::size_t k = k_begin; k < k_end; ++k) {
      for (std::size_t a = 0; a < M; ++a)
        for (std::size_t b = 0; b < M; ++b) {
          const std::size_t h = ty * M + a, w = tx * M + b;
          if (h >= s.out_h || w >= s.out_w) continue;
          float acc = 0.0f;
          for (std::size_t r = 0; r < T; ++r)
            for (std::size_t q = 0; q < T; ++q)
              acc += at[a][r] * m[grouped(r * T + q, k, K, i, v_rows)] * at[b][q];
          const std::size_t offset = blocked_offset(n, K, s.out_h, s.out_w, s.out_block, k, h, w);
          if (e.bias) acc += e.bias[k];
          if (e.residual) acc += e.residual[offset];
          y[offset] = std::min(std::max(acc, e.lo), e.hi);
        }
    }
  }
}

// u = G g G^T in double, g the filter from input c to output k (see WinogradWeightsFn).
template <std::size_t T>
void weight_transform(const double (&G)[T][3], const float* weights, std::size_t C, std::size_t K,
                      bool backward_data, std::size_t k_begin, std::size_t k_end, float* u) {
  constexpr std::size_t kCols = kWinogradGemmColumns;
  for (std::size_t k = k_begin; k < k_end; ++k)
    for (std::size_t c = 0; c < C; ++c) {
      double g[9];
      for (std::size_t t = 0; t < 9; ++t)
        g[t] = backward_data ? weights[(c * K + k) * 9 + 8 - t] : weights[(k * C + c) * 9 + t];
      double gg[T][3];  // G g
      for (std::size_t r = 0; r < T; ++r)
        for (std::size_t j = 0; j < 3; ++j)
          gg[r][j] = G[r][0] * g[j] + G[r][1] * g[3 + j] + G[r][2] * g[6 + j];
      for (std::size_t r = 0; r < T; ++r)
        for (std::size_t q = 0; q < T; ++q)
          u[((r * T + q) * K + k / kCols * kCols) * C + c * kCols + k % kCols] =
              static_cast<float>(gg[r][0] * G[q][0] + gg[r][1] * G[q][1] + gg[r][2] * G[q][2]);
    }
}

// Offset of U's (and dU's) entry at position p, input channel c, output channel k.
std::size_t panel_offset(std::size_t p, std::size_t c, std::size_t k, std::size_t C, std::size_t K) {
  constexpr std::size_t kCols = kWinogradGemmColumns;
  return (p * K + k / kCols * kCols) * C + c * kCols + k % kCols;
}

}  // namespace

void f32_winograd_output_grad_4x3__ref(const WinogradShape& s, const float* dy, std::size_t first_tile,
                                       std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                       std::size_t k_end, float* m) {
  const std::size_t per_image = s.tiles_h * s.tiles_w, K = s.out_channels;
  for (std::size_t i = 0; i < tiles; ++i) {
    const std::size_t t = first_tile + i, n = t / per_image, ty = t % per_image / s.tiles_w,
                      tx = t % s.tiles_w;
    for (std::size_t k = k_begin; k < k_end; ++k) {
      float d[4][4];
      for (std::size_t a = 0; a < 4; ++a)
        for (std::size_t b = 0; b < 4; ++b) {
          const std::size_t h = ty * 4 + a, w = tx * 4 + b;
          d[a][b] = h < s.out_h && w < s.out_w
                        ? dy[blocked_offset(n, K, s.out_h, s.out_w, s.out_block, k, h, w)]
                        : 0.0f;
        }
      // A dY A^T, A = (A^T)^T.
      for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t q = 0; q < 6; ++q) {
          float acc = 0.0f;
          for (std::size_t a = 0; a < 4; ++a)
            for (std::size_t b = 0; b < 4; ++b) acc += kAt4[a][r] * d[a][b] * kAt4[b][q];
          m[grouped(r * 6 + q, k, K, i, v_rows)] = acc;
        }
    }
  }
}

void f32_winograd_gemm_weights__ref(const float* v, const float* m, float* du, std::size_t tiles,
                                    std::size_t v_rows, std::size_t channels, std::size_t out_channels,
                                    std::size_t k_begin, std::size_t k_end, bool accumulate) {
  for (std::size_t p = 0; p < kWinogradPositions; ++p)
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t k = k_begin; k < k_end; ++k) {
        float acc = 0.0f;
        for (std::size_t i = 0; i < tiles; ++i)
          acc += v[grouped(p, c, channels, i, v_rows)] * m[grouped(p, k, out_channels, i, v_rows)];
        float& out = du[panel_offset(p, c, k, channels, out_channels)];
        out = (accumulate ? out : 0.0f) + acc;
      }
}

void f32_winograd_weight_grad_4x3__ref(const float* du, std::size_t channels, std::size_t out_channels,
                                       std::size_t k_begin, std::size_t k_end, float* dw) {
  for (std::size_t k = k_begin; k < k_end; ++k)
    for (std::size_t c = 0; c < channels; ++c)
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
          double acc = 0.0;  // G^T dU G
          for (std::size_t r = 0; r < 6; ++r)
            for (std::size_t q = 0; q < 6; ++q)
              acc += kG4[r][i] * du[panel_offset(r * 6 + q, c, k, channels, out_channels)] * kG4[q][j];
          dw[(k * channels + c) * 9 + i * 3 + j] = static_cast<float>(acc);
        }
}

void f32_winograd_weights_4x3__ref(const float* weights, std::size_t channels, std::size_t out_channels,
                                   bool backward_data, std::size_t k_begin, std::size_t k_end, float* u) {
  weight_transform(kG4, weights, channels, out_channels, backward_data, k_begin, k_end, u);
}

void f32_winograd_weights_2x3__ref(const float* weights, std::size_t channels, std::size_t out_channels,
                                   bool backward_data, std::size_t k_begin, std::size_t k_end, float* u) {
  weight_transform(kG2, weights, channels, out_channels, backward_data, k_begin, k_end, u);
}

void f32_winograd_input_4x3__ref(const WinogradShape& s, const float* x, std::size_t first_tile,
                                 std::size_t tiles, float* v, std::size_t v_rows) {
  input_transform<4>(kBt4, s, x, first_tile, tiles, v, v_rows);
}

void f32_winograd_input_2x3__ref(const WinogradShape& s, const float* x, std::size_t first_tile,
                                 std::size_t tiles, float* v, std::size_t v_rows) {
  input_transform<2>(kBt2, s, x, first_tile, tiles, v, v_rows);
}

void f32_winograd_gemm__ref(std::size_t positions, const float* v, const float* u, float* m,
                            std::size_t tiles, std::size_t v_rows, std::size_t channels,
                            std::size_t out_channels, std::size_t k_begin, std::size_t k_end) {
  constexpr std::size_t kCols = kWinogradGemmColumns;
  for (std::size_t p = 0; p < positions; ++p) {
    const float* up = u + p * channels * out_channels;
    for (std::size_t i = 0; i < tiles; ++i)
      for (std::size_t k = k_begin; k < k_end; ++k) {
        const float* panel = up + k / kCols * channels * kCols + k % kCols;
        float acc = 0.0f;
        for (std::size_t c = 0; c < channels; ++c)
          acc += v[grouped(p, c, channels, i, v_rows)] * panel[c * kCols];
        m[grouped(p, k, out_channels, i, v_rows)] = acc;
      }
  }
}

void f32_winograd_output_4x3__ref(const WinogradShape& s, const float* m, std::size_t first_tile,
                                  std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                  std::size_t k_end, const WinogradEpilogue& e, float* y) {
  output_transform<4>(kAt4, s, m, first_tile, tiles, v_rows, k_begin, k_end, e, y);
}

void f32_winograd_output_2x3__ref(const WinogradShape& s, const float* m, std::size_t first_tile,
                                  std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                  std::size_t k_end, const WinogradEpilogue& e, float* y) {
  output_transform<2>(kAt2, s, m, first_tile, tiles, v_rows, k_begin, k_end, e, y);
}

}  // namespace cpudl::kernels
