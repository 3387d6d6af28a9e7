// AVX2 Winograd F(4x4, 3x3) and F(2x2, 3x3) kernels (winograd.h): 8 channels per vector, the
// transforms factored (a 1-D pass of F(4x4) is 6 FMAs and 6 adds, of F(2x2) 4 adds), one
// transform body over the tile size, and the GEMM a 6 x 16 register tile (12 accumulators, two
// weight vectors, one broadcast) over the channels.
#include <immintrin.h>

#include <cstddef>

#include "kernels/winograd/winograd.h"

namespace cpudl::kernels {
namespace {

// The 1-D transforms of F(M x M, 3x3) over T = M + 2 points.
template <int M>
struct Tile;

template <>
struct Tile<4> {
  static constexpr int kPoints = 6;
  // r = B^T d: r0 = 4 d0 - 5 d2 + d4, r1,2 = (d4 - 4 d2) +- (d3 - 4 d1),
  // r3,4 = (d4 - d2) +- 2 (d3 - d1), r5 = 4 d1 - 5 d3 + d5.
  static void input(const __m256 d[6], __m256 r[6]) {
    const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f);
    const __m256 t0 = _mm256_fnmadd_ps(four, d[2], d[4]), t1 = _mm256_fnmadd_ps(four, d[1], d[3]);
    const __m256 t2 = _mm256_sub_ps(d[4], d[2]), t3 = _mm256_sub_ps(d[3], d[1]);
    r[0] = _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4]));
    r[1] = _mm256_add_ps(t0, t1);
    r[2] = _mm256_sub_ps(t0, t1);
    r[3] = _mm256_fmadd_ps(two, t3, t2);
    r[4] = _mm256_fnmadd_ps(two, t3, t2);
    r[5] = _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5]));
  }
  // o = A^T m: with a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4:
  // o0 = m0 + a + c, o1 = b + 2 d, o2 = a + 4 c, o3 = b + 8 d + m5.
  static void output(const __m256 m[6], __m256 o[4]) {
    const __m256 a = _mm256_add_ps(m[1], m[2]), b = _mm256_sub_ps(m[1], m[2]);
    const __m256 c = _mm256_add_ps(m[3], m[4]), d = _mm256_sub_ps(m[3], m[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], a), c);
    o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d, b);
    o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), c, a);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d, b), m[5]);
  }
  // r = A d, the output transform's transpose (4 -> 6 points): r0 = d0, r1,2 = (d0 + d2) +- (d1 + d3),
  // r3,4 = (d0 + 4 d2) +- (2 d1 + 8 d3), r5 = d3.
  static void output_grad(const __m256 d[4], __m256 r[6]) {
    const __m256 even = _mm256_add_ps(d[0], d[2]), odd = _mm256_add_ps(d[1], d[3]);
    const __m256 even4 = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), d[2], d[0]);
    const __m256 odd4 = _mm256_fmadd_ps(_mm256_set1_ps(8.0f), d[3], _mm256_add_ps(d[1], d[1]));
    r[0] = d[0];
    r[1] = _mm256_add_ps(even, odd);
    r[2] = _mm256_sub_ps(even, odd);
    r[3] = _mm256_add_ps(even4, odd4);
    r[4] = _mm256_sub_ps(even4, odd4);
    r[5] = d[3];
  }
  // r = G^T x, the weight transform's transpose (6 -> 3 points): with s = x1 + x2, t = x3 + x4,
  // r0 = x0 / 4 - s / 6 + t / 24, r1 = (x2 - x1) / 6 + (x3 - x4) / 12, r2 = (t - s) / 6 + x5.
  static void weight_grad(const __m256 x[6], __m256 r[3]) {
    const __m256 sixth = _mm256_set1_ps(1.0f / 6), twelfth = _mm256_set1_ps(1.0f / 12);
    const __m256 s = _mm256_add_ps(x[1], x[2]), t = _mm256_add_ps(x[3], x[4]);
    r[0] = _mm256_fnmadd_ps(
        sixth, s, _mm256_fmadd_ps(_mm256_set1_ps(0.25f), x[0], _mm256_mul_ps(_mm256_set1_ps(1.0f / 24), t)));
    r[1] =
        _mm256_fmadd_ps(sixth, _mm256_sub_ps(x[2], x[1]), _mm256_mul_ps(twelfth, _mm256_sub_ps(x[3], x[4])));
    r[2] = _mm256_fmadd_ps(sixth, _mm256_sub_ps(t, s), x[5]);
  }
  // r = G g: r0 = g0 / 4, r1,2 = -((g0 + g2) +- g1) / 6, r3,4 = (g0 / 24 + g2 / 6) +- g1 / 12, r5 = g2.
  static void weights(const __m256 g[3], __m256 r[6]) {
    const __m256 sum = _mm256_add_ps(g[0], g[2]), minus_sixth = _mm256_set1_ps(-1.0f / 6);
    const __m256 t =
        _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 24), g[0], _mm256_mul_ps(_mm256_set1_ps(1.0f / 6), g[2]));
    r[0] = _mm256_mul_ps(_mm256_set1_ps(0.25f), g[0]);
    r[1] = _mm256_mul_ps(minus_sixth, _mm256_add_ps(sum, g[1]));
    r[2] = _mm256_mul_ps(minus_sixth, _mm256_sub_ps(sum, g[1]));
    r[3] = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 12), g[1], t);
    r[4] = _mm256_fnmadd_ps(_mm256_set1_ps(1.0f / 12), g[1], t);
    r[5] = g[2];
  }
};

template <>
struct Tile<2> {
  static constexpr int kPoints = 4;
  // r = B^T d: r0 = d0 - d2, r1 = d1 + d2, r2 = d2 - d1, r3 = d1 - d3.
  static void input(const __m256 d[4], __m256 r[4]) {
    r[0] = _mm256_sub_ps(d[0], d[2]);
    r[1] = _mm256_add_ps(d[1], d[2]);
    r[2] = _mm256_sub_ps(d[2], d[1]);
    r[3] = _mm256_sub_ps(d[1], d[3]);
  }
  // o = A^T m: o0 = m0 + m1 + m2, o1 = m1 - m2 - m3.
  static void output(const __m256 m[4], __m256 o[2]) {
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]);
    o[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
  }
  // r = G g: r0 = g0, r1,2 = ((g0 + g2) +- g1) / 2, r3 = g2.
  static void weights(const __m256 g[3], __m256 r[4]) {
    const __m256 sum = _mm256_add_ps(g[0], g[2]), half = _mm256_set1_ps(0.5f);
    r[0] = g[0];
    r[1] = _mm256_mul_ps(half, _mm256_add_ps(sum, g[1]));
    r[2] = _mm256_mul_ps(half, _mm256_sub_ps(sum, g[1]));
    r[3] = g[2];
  }
};

// Rows r < R of m = v times one 16-column panel (C x 16), in the grouped form of
// kernel_types.h: v points at the first row of channel group 0 (group g at g * group_stride,
// rows 8 floats apart, so the R rows' 8 channels are 8R contiguous floats), m at the first row
// of output group k / 8 (its second group at group_stride). `next`, when not null, is the panel
// to prefetch meanwhile: one line per channel covers its C x 16 floats.
template <int R>
void gemm_rows(const float* v, std::size_t channels, std::size_t group_stride, const float* panel, float* m,
               const float* next) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (std::size_t g = 0; g < channels; g += 8) {
    const float* vg = v + g / 8 * group_stride;
    const float* pg = panel + g * 16;
#pragma GCC unroll 8
    for (int cc = 0; cc < 8; ++cc) {
      if (next) _mm_prefetch(reinterpret_cast<const char*>(next + (g + cc) * 16), _MM_HINT_T0);
      const __m256 b0 = _mm256_load_ps(pg + cc * 16), b1 = _mm256_load_ps(pg + cc * 16 + 8);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(vg + r * 8 + cc);
        lo[r] = _mm256_fmadd_ps(a, b0, lo[r]);
        hi[r] = _mm256_fmadd_ps(a, b1, hi[r]);
      }
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(m + r * 8, lo[r]);
    _mm256_storeu_ps(m + group_stride + r * 8, hi[r]);
  }
}

template <int M>
void input_transform(const WinogradShape& s, const float* x, std::size_t first_tile, std::size_t tiles,
                     float* v, std::size_t v_rows) {
  constexpr int T = Tile<M>::kPoints;
  const std::size_t per_image = s.tiles_h * s.tiles_w, C = s.channels, B = s.block;
  const std::size_t plane = s.height * s.width * B, position_stride = v_rows * C + kWinogradPositionPad;
  const auto width = static_cast<std::ptrdiff_t>(s.width), block = static_cast<std::ptrdiff_t>(B);
  alignas(32) float tmp[T][T][8];
  // Channel groups outside, tiles inside: each of the T x T positions is then written as one
  // sequential stream (consecutive tiles of a group are contiguous, kernel_types.h), and the
  // tiles walk along the same T input rows of one channel plane.
  for (std::size_t c = 0; c < C; c += 8) {
    for (std::size_t i = 0; i < tiles; ++i) {
      const std::size_t t = first_tile + i, n = t / per_image, ty = t % per_image / s.tiles_w,
                        tx = t % s.tiles_w;
      // Which of the patch's rows and columns fall inside the image (the rest is zero padding).
      const std::ptrdiff_t h0 = static_cast<std::ptrdiff_t>(ty * M) - static_cast<std::ptrdiff_t>(s.pad);
      const std::ptrdiff_t w0 = static_cast<std::ptrdiff_t>(tx * M) - static_cast<std::ptrdiff_t>(s.pad);
      bool row_inside[T], col_inside[T];
      for (int a = 0; a < T; ++a) {
        row_inside[a] = h0 + a >= 0 && h0 + a < static_cast<std::ptrdiff_t>(s.height);
        col_inside[a] = w0 + a >= 0 && w0 + a < width;
      }
      // Pixel (h0 + a, w0 + b) of this channel group; only dereferenced inside the image.
      const float* corner = x + n * C * s.height * s.width + c / B * plane + c % B;
      const std::ptrdiff_t corner_offset = (h0 * width + w0) * block;
      // The patch two tiles ahead: its rows come from L3 or memory, and the prefetchers alone
      // left the loads above waiting (F(4x4) at 64 channels, batch 16: 6.4 vs 4.8 ms).
      if (i + 2 < tiles && tx + 2 < s.tiles_w)
        for (int a = 0; a < T; ++a)
          if (row_inside[a]) {
            // This group's 8 channels of each pixel: within one line in either layout (a
            // blocked row is one run of T pixels, a channels-last one a line per pixel).
            const float* ahead = corner + corner_offset + (a * width + 2 * M) * block;
            for (int b = 0; b < T; ++b)
              _mm_prefetch(reinterpret_cast<const char*>(ahead + b * block), _MM_HINT_T0);
          }
      for (int b = 0; b < T; ++b) {
        __m256 d[T], r[T];
        for (int a = 0; a < T; ++a)
          d[a] = row_inside[a] && col_inside[b]
                     ? _mm256_loadu_ps(corner + corner_offset + (a * width + b) * block)
                     : _mm256_setzero_ps();
        Tile<M>::input(d, r);
        for (int a = 0; a < T; ++a) _mm256_store_ps(tmp[a][b], r[a]);
      }
      float* vt = v + (c / 8 * v_rows + i) * 8;
      for (int a = 0; a < T; ++a) {
        __m256 d[T], r[T];
        for (int b = 0; b < T; ++b) d[b] = _mm256_load_ps(tmp[a][b]);
        Tile<M>::input(d, r);
        for (int q = 0; q < T; ++q) _mm256_storeu_ps(vt + (a * T + q) * position_stride, r[q]);
      }
    }
  }
}

template <int M>
void output_transform(const WinogradShape& s, const float* m, std::size_t first_tile, std::size_t tiles,
                      std::size_t v_rows, std::size_t k_begin, std::size_t k_end, const WinogradEpilogue& e,
                      float* y) {
  constexpr int T = Tile<M>::kPoints;
  const std::size_t per_image = s.tiles_h * s.tiles_w, K = s.out_channels, B = s.out_block;
  const std::size_t plane = s.out_h * s.out_w * B, position_stride = v_rows * K + kWinogradPositionPad;
  const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
  alignas(32) float tmp[M][T][8];
  // Channel groups outside, tiles inside, as in the input transform: T x T sequential read
  // streams and M output rows of one channel plane.
  for (std::size_t k = k_begin; k < k_end; k += 8) {
    const __m256 bias = e.bias ? _mm256_loadu_ps(e.bias + k) : _mm256_setzero_ps();
    for (std::size_t i = 0; i < tiles; ++i) {
      const std::size_t t = first_tile + i, n = t / per_image, ty = t % per_image / s.tiles_w,
                        tx = t % s.tiles_w;
      const std::size_t rows = s.out_h - ty * M < M ? s.out_h - ty * M : M;
      const std::size_t cols = s.out_w - tx * M < M ? s.out_w - tx * M : M;
      const float* mt = m + (k / 8 * v_rows + i) * 8;
      for (int q = 0; q < T; ++q) {
        __m256 mm[T], o[M];
        for (int r = 0; r < T; ++r) mm[r] = _mm256_loadu_ps(mt + (r * T + q) * position_stride);
        Tile<M>::output(mm, o);
        for (int a = 0; a < M; ++a) _mm256_store_ps(tmp[a][q], o[a]);
      }
      const std::size_t corner =
          n * K * s.out_h * s.out_w + k / B * plane + k % B + (ty * M * s.out_w + tx * M) * B;
      for (std::size_t a = 0; a < rows; ++a) {
        __m256 mm[T], o[M];
        for (int q = 0; q < T; ++q) mm[q] = _mm256_load_ps(tmp[a][q]);
        Tile<M>::output(mm, o);
        for (std::size_t b = 0; b < cols; ++b) {
          const std::size_t at = corner + (a * s.out_w + b) * B;
          __m256 value = _mm256_add_ps(o[b], bias);
          if (e.residual) value = _mm256_add_ps(value, _mm256_loadu_ps(e.residual + at));
          _mm256_storeu_ps(y + at, _mm256_min_ps(_mm256_max_ps(value, lo), hi));
        }
      }
    }
  }
}

// u = G g G^T for 8 output channels per vector (lane l: channel k + l). A lane's filter is C x 9
// floats after the previous one's in OIHW, 9 in the backward-data (transposed) order: the taps
// are gathered. The T x T positions of u are K x C floats apart, a power of two in ResNets
// (1 MB at 512 channels), so storing each filter's straight to u put all of them on one cache
// set (512 -> 512 channels: 6.3 ms); a block of 8 input channels goes through a buffer instead
// and leaves as T x T sequential runs of 8 whole lines (1.1 ms).
template <int M>
void weight_transform(const float* weights, std::size_t C, std::size_t K, bool backward_data,
                      std::size_t k_begin, std::size_t k_end, float* u) {
  constexpr int T = Tile<M>::kPoints;
  constexpr std::size_t kBlock = 8, kRun = kBlock * kWinogradGemmColumns;  // input channels, floats per run
  alignas(32) float buffer[T * T][kRun];
  const int lane_stride = backward_data ? 9 : static_cast<int>(C * 9);
  const __m256i lanes =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(lane_stride));
  for (std::size_t k = k_begin; k < k_end; k += kWinogradGemmColumns)
    for (std::size_t c0 = 0; c0 < C; c0 += kBlock) {  // C is a multiple of 8
      for (std::size_t i = 0; i < kBlock * 2; ++i) {
        const std::size_t c = c0 + i / 2, half = i % 2, k0 = k + 8 * half;
        const float* first = backward_data ? weights + (c * K + k0) * 9 : weights + (k0 * C + c) * 9;
        __m256 g[3][3];  // g[i][j]: filter row i, column j (rotated for backward data)
        for (int t = 0; t < 9; ++t)
          g[t / 3][t % 3] = _mm256_i32gather_ps(first + (backward_data ? 8 - t : t), lanes, 4);
        __m256 gg[T][3];  // G g, column by column
        for (int j = 0; j < 3; ++j) {
          const __m256 column[3] = {g[0][j], g[1][j], g[2][j]};
          __m256 r[T];
          Tile<M>::weights(column, r);
          for (int a = 0; a < T; ++a) gg[a][j] = r[a];
        }
        for (int a = 0; a < T; ++a) {
          __m256 r[T];
          Tile<M>::weights(gg[a], r);  // row a of (G g) G^T
          for (int q = 0; q < T; ++q) _mm256_store_ps(&buffer[a * T + q][i * 8], r[q]);
        }
      }
      float* out = u + k * C + c0 * kWinogradGemmColumns;
      for (int p = 0; p < T * T; ++p)
        for (std::size_t j = 0; j < kRun; j += 8)
          _mm256_storeu_ps(out + static_cast<std::size_t>(p) * K * C + j, _mm256_load_ps(&buffer[p][j]));
    }
}

// m = A dy A^T per tile, 8 output channels at a time (the grouped form of kernel_types.h), dy in
// y's layout; rows and columns past the image are zero.
void output_grad_transform(const WinogradShape& s, const float* dy, std::size_t first_tile, std::size_t tiles,
                           std::size_t v_rows, std::size_t k_begin, std::size_t k_end, float* m) {
  const std::size_t per_image = s.tiles_h * s.tiles_w, K = s.out_channels, B = s.out_block;
  const std::size_t plane = s.out_h * s.out_w * B, position_stride = v_rows * K + kWinogradPositionPad;
  alignas(32) float tmp[6][4][8];
  for (std::size_t k = k_begin; k < k_end; k += 8)
    for (std::size_t i = 0; i < tiles; ++i) {
      const std::size_t t = first_tile + i, n = t / per_image, ty = t % per_image / s.tiles_w,
                        tx = t % s.tiles_w;
      const std::size_t rows = s.out_h - ty * 4 < 4 ? s.out_h - ty * 4 : 4;
      const std::size_t cols = s.out_w - tx * 4 < 4 ? s.out_w - tx * 4 : 4;
      const float* corner =
          dy + n * K * s.out_h * s.out_w + k / B * plane + k % B + (ty * 4 * s.out_w + tx * 4) * B;
      for (std::size_t b = 0; b < 4; ++b) {
        __m256 d[4], r[6];
        for (std::size_t a = 0; a < 4; ++a)
          d[a] = a < rows && b < cols ? _mm256_loadu_ps(corner + (a * s.out_w + b) * B) : _mm256_setzero_ps();
        Tile<4>::output_grad(d, r);
        for (int a = 0; a < 6; ++a) _mm256_store_ps(tmp[a][b], r[a]);
      }
      float* mt = m + (k / 8 * v_rows + i) * 8;
      for (int a = 0; a < 6; ++a) {
        __m256 d[4], r[6];
        for (int b = 0; b < 4; ++b) d[b] = _mm256_load_ps(tmp[a][b]);
        Tile<4>::output_grad(d, r);
        for (int q = 0; q < 6; ++q) _mm256_storeu_ps(mt + (a * 6 + q) * position_stride, r[q]);
      }
    }
}

// R input channels (rows of du) x one 16-column panel of output channels, reduced over the
// tiles: row r's values of tile i at v_rows_at[r] + 8 i (its channel group's stream), the
// panel's two 8-channel groups at m0 + 8 i and m1 + 8 i. 2R accumulators (12 of the 16 ymm).
template <int R>
void gemm_weights_rows(const float* const* v_rows_at, const float* m0, const float* m1, std::size_t tiles,
                       float* out, bool accumulate) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (std::size_t i = 0; i < tiles; ++i) {
    const __m256 b0 = _mm256_loadu_ps(m0 + i * 8), b1 = _mm256_loadu_ps(m1 + i * 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(v_rows_at[r] + i * 8);
      lo[r] = _mm256_fmadd_ps(a, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(a, b1, hi[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* row = out + r * kWinogradGemmColumns;
    if (accumulate) {
      lo[r] = _mm256_add_ps(lo[r], _mm256_loadu_ps(row));
      hi[r] = _mm256_add_ps(hi[r], _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, lo[r]);
    _mm256_storeu_ps(row + 8, hi[r]);
  }
}

}  // namespace

void f32_winograd_output_grad_4x3__avx2(const WinogradShape& s, const float* dy, std::size_t first_tile,
                                        std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                        std::size_t k_end, float* m) {
  output_grad_transform(s, dy, first_tile, tiles, v_rows, k_begin, k_end, m);
}

void f32_winograd_gemm_weights__avx2(const float* v, const float* m, float* du, std::size_t tiles,
                                     std::size_t v_rows, std::size_t channels, std::size_t out_channels,
                                     std::size_t k_begin, std::size_t k_end, bool accumulate) {
  using Rows = void (*)(const float* const*, const float*, const float*, std::size_t, float*, bool);
  static constexpr Rows kRows[] = {nullptr,
                                   gemm_weights_rows<1>,
                                   gemm_weights_rows<2>,
                                   gemm_weights_rows<3>,
                                   gemm_weights_rows<4>,
                                   gemm_weights_rows<5>,
                                   gemm_weights_rows<6>};
  for (std::size_t p = 0; p < kWinogradPositions; ++p) {
    const float* vp = v + p * (v_rows * channels + kWinogradPositionPad);
    const float* mp = m + p * (v_rows * out_channels + kWinogradPositionPad);
    float* dup = du + p * channels * out_channels;
    for (std::size_t c = 0; c < channels; c += 6) {
      const std::size_t rows = channels - c < 6 ? channels - c : 6;
      const float* v_rows_at[6];
      for (std::size_t r = 0; r < rows; ++r) v_rows_at[r] = vp + (c + r) / 8 * v_rows * 8 + (c + r) % 8;
      for (std::size_t k = k_begin; k < k_end; k += kWinogradGemmColumns) {
        const float* m0 = mp + k / 8 * v_rows * 8;
        kRows[rows](v_rows_at, m0, m0 + v_rows * 8, tiles, dup + k * channels + c * kWinogradGemmColumns,
                    accumulate);
      }
    }
  }
}

void f32_winograd_weight_grad_4x3__avx2(const float* du, std::size_t channels, std::size_t out_channels,
                                        std::size_t k_begin, std::size_t k_end, float* dw) {
  const std::size_t position_stride = channels * out_channels;
  alignas(32) float out[2][9][8];
  for (std::size_t k = k_begin; k < k_end; k += kWinogradGemmColumns)
    for (std::size_t c = 0; c < channels; ++c) {
      // Both halves of the panel row together: each of the 36 lines is read once.
      const float* at = du + k * channels + c * kWinogradGemmColumns;
      __m256 t[2][3][6];  // G^T dU, column by column
      for (int q = 0; q < 6; ++q) {
        __m256 x[2][6];
        for (int r = 0; r < 6; ++r) {
          x[0][r] = _mm256_loadu_ps(at + static_cast<std::size_t>(r * 6 + q) * position_stride);
          x[1][r] = _mm256_loadu_ps(at + static_cast<std::size_t>(r * 6 + q) * position_stride + 8);
        }
        for (int h = 0; h < 2; ++h) {
          __m256 r3[3];
          Tile<4>::weight_grad(x[h], r3);
          for (int i = 0; i < 3; ++i) t[h][i][q] = r3[i];
        }
      }
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 3; ++i) {
          __m256 r3[3];
          Tile<4>::weight_grad(t[h][i], r3);  // row i of (G^T dU) G
          for (int j = 0; j < 3; ++j) _mm256_store_ps(out[h][i * 3 + j], r3[j]);
        }
      for (int h = 0; h < 2; ++h)
        for (std::size_t l = 0; l < 8; ++l) {
          float* filter = dw + ((k + h * 8 + l) * channels + c) * 9;
          for (int tap = 0; tap < 9; ++tap) filter[tap] = out[h][tap][l];
        }
    }
}

void f32_winograd_weights_4x3__avx2(const float* weights, std::size_t channels, std::size_t out_channels,
                                    bool backward_data, std::size_t k_begin, std::size_t k_end, float* u) {
  weight_transform<4>(weights, channels, out_channels, backward_data, k_begin, k_end, u);
}

void f32_winograd_weights_2x3__avx2(const float* weights, std::size_t channels, std::size_t out_channels,
                                    bool backward_data, std::size_t k_begin, std::size_t k_end, float* u) {
  weight_transform<2>(weights, channels, out_channels, backward_data, k_begin, k_end, u);
}

void f32_winograd_gemm__avx2(std::size_t positions, const float* v, const float* u, float* m,
                             std::size_t tiles, std::size_t v_rows, std::size_t channels,
                             std::size_t out_channels, std::size_t k_begin, std::size_t k_end) {
  for (std::size_t p = 0; p < positions; ++p) {
    const float* vp = v + p * (v_rows * channels + kWinogradPositionPad);
    const float* up = u + p * channels * out_channels;
    float* mp = m + p * (v_rows * out_channels + kWinogradPositionPad);
    for (std::size_t k = k_begin; k < k_end; k += kWinogradGemmColumns) {
      const float* panel = up + k * channels;  // panel k / 16, C x 16 floats
      // The weights stream from L3 or memory (36 x C x K floats, megabytes): the first row
      // group fetches the next panel (of this position or the next one) while it computes.
      const bool last = p + 1 == positions && k + kWinogradGemmColumns >= k_end;
      const float* next = last ? nullptr
                               : (k + kWinogradGemmColumns < k_end
                                      ? panel + kWinogradGemmColumns * channels
                                      : u + (p + 1) * channels * out_channels + k_begin * channels);
      const std::size_t group_stride = v_rows * 8;
      std::size_t i = 0;
      for (; i + 6 <= tiles; i += 6, next = nullptr)
        gemm_rows<6>(vp + i * 8, channels, group_stride, panel, mp + k * v_rows + i * 8, next);
      // The last 1-5 tiles: a narrower register tile (indexed by the row count).
      using Rows = void (*)(const float*, std::size_t, std::size_t, const float*, float*, const float*);
      static constexpr Rows kTail[] = {nullptr,      gemm_rows<1>, gemm_rows<2>,
                                       gemm_rows<3>, gemm_rows<4>, gemm_rows<5>};
      if (i < tiles)
        kTail[tiles - i](vp + i * 8, channels, group_stride, panel, mp + k * v_rows + i * 8, next);
    }
  }
}

void f32_winograd_input_4x3__avx2(const WinogradShape& s, const float* x, std::size_t first_tile,
                                  std::size_t tiles, float* v, std::size_t v_rows) {
  input_transform<4>(s, x, first_tile, tiles, v, v_rows);
}

void f32_winograd_input_2x3__avx2(const WinogradShape& s, const float* x, std::size_t first_tile,
                                  std::size_t tiles, float* v, std::size_t v_rows) {
  input_transform<2>(s, x, first_tile, tiles, v, v_rows);
}

void f32_winograd_output_4x3__avx2(const WinogradShape& s, const float* m, std::size_t first_tile,
                                   std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                   std::size_t k_end, const WinogradEpilogue& e, float* y) {
  output_transform<4>(s, m, first_tile, tiles, v_rows, k_begin, k_end, e, y);
}

void f32_winograd_output_2x3__avx2(const WinogradShape& s, const float* m, std::size_t first_tile,
                                   std::size_t tiles, std::size_t v_rows, std::size_t k_begin,
                                   std::size_t k_end, const WinogradEpilogue& e, float* y) {
  output_transform<2>(s, m, first_tile, tiles, v_rows, k_begin, k_end, e, y);
}

}  // namespace cpudl::kernels
