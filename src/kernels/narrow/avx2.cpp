// AVX2 narrow linear kernels (narrow.h). Each walks the m x k activation (or its gradient) in
// storage order, k in chunks whose slice of w stays in L1/L2 while every row passes over it, with
// register blocks sized so that each loaded vector feeds several FMAs.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/narrow/narrow.h"
#include "kernels/simd/avx2.inl"

namespace cpudl::kernels {
namespace {

// Columns per chunk: w's slice (n <= 16 rows of it) stays in L2, a block's x rows in L1.
constexpr std::size_t kChunk = 1024;

// y[r][c] += x[r] . w[c] over columns [k0, k1) (a multiple of 8 long), R rows x C outputs in
// registers: per 8 columns R x loads and C w loads feed R * C FMAs.
template <std::size_t R, std::size_t C>
void forward_block(const float* const* xr, const float* const* wr, std::size_t k0, std::size_t k1, float* y,
                   std::size_t n) {
  __m256 acc[R][C];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (std::size_t p = k0; p < k1; p += 8) {
    __m256 xv[R];
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(xr[r] + p);
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) {
      const __m256 wv = _mm256_loadu_ps(wr[c] + p);
#pragma GCC unroll 16
      for (std::size_t r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) y[r * n + c] += Avx2::reduce_add(acc[r][c]);
}

template <std::size_t R>
void forward_rows(const float* x, const float* w, float* y, std::size_t k0, std::size_t k1, std::size_t n,
                  std::size_t ld) {
  const float* xr[R];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) xr[r] = x + r * ld;
  std::size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* wr[4] = {w + j * ld, w + (j + 1) * ld, w + (j + 2) * ld, w + (j + 3) * ld};
    forward_block<R, 4>(xr, wr, k0, k1, y + j, n);
  }
  for (; j < n; ++j) {
    const float* wr[1] = {w + j * ld};
    forward_block<R, 1>(xr, wr, k0, k1, y + j, n);
  }
}

// dx[r][p..] = sum_j dy[r][j] w[j][p..] for R rows x V vectors of columns at p; with Stream,
// non-temporal stores (dx 32-byte aligned).
template <std::size_t R, std::size_t V, bool Stream>
void data_block(const float* dy, const float* w, float* dx, std::size_t p, std::size_t n, std::size_t ld) {
  __m256 acc[R][V];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  for (std::size_t j = 0; j < n; ++j) {
    __m256 wv[V];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < V; ++v) wv[v] = _mm256_loadu_ps(w + j * ld + p + v * 8);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
      const __m256 g = _mm256_broadcast_ss(dy + r * n + j);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(g, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < V; ++v) {
      if constexpr (Stream)
        _mm256_stream_ps(dx + r * ld + p + v * 8, acc[r][v]);
      else
        _mm256_storeu_ps(dx + r * ld + p + v * 8, acc[r][v]);
    }
}

template <std::size_t R, bool Stream>
void data_rows(const float* dy, const float* w, float* dx, std::size_t k0, std::size_t k1, std::size_t n,
               std::size_t ld) {
  std::size_t p = k0;
  for (; p + 24 <= k1; p += 24) data_block<R, 3, Stream>(dy, w, dx, p, n, ld);
  for (; p + 8 <= k1; p += 8) data_block<R, 1, Stream>(dy, w, dx, p, n, ld);
}

// The data gradient of a large layer is written with non-temporal stores: it is read back only
// by the previous layer's backward pass, after other work, and a normal store first reads each
// line it writes (SimpleCNN at batch 256, 1 thread: the whole training step 27.5 -> 20-23.5 ms).
constexpr std::size_t kStreamBytes = std::size_t{1} << 20;

template <bool Stream>
void data_all(const float* dy, const float* w, float* dx, std::size_t m, std::size_t kv, std::size_t n,
              std::size_t ld) {
  for (std::size_t k0 = 0; k0 < kv; k0 += kChunk) {
    const std::size_t k1 = std::min(k0 + kChunk, kv);
    std::size_t i = 0;
    for (; i + 4 <= m; i += 4) data_rows<4, Stream>(dy + i * n, w, dx + i * ld, k0, k1, n, ld);
    for (; i < m; ++i) data_rows<1, Stream>(dy + i * n, w, dx + i * ld, k0, k1, n, ld);
  }
  if constexpr (Stream) _mm_sfence();
}

// dw[j0 + j][p .. p + 8V) += sum over `rows` rows of dy[i][j0 + j] * x[i][p ..] for NB outputs:
// the rows' V x vectors (L1 after the first output block) each feed NB FMAs with broadcast
// gradients, NB * V independent sums (V = 1 left 5 chains one FMA latency apart per row: 22% of
// the roof in cache); the sums go into dw once per block of rows.
template <std::size_t NB, std::size_t V>
void weights_block(const float* x, const float* dy, float* dw, std::size_t rows, std::size_t p,
                   std::size_t j0, std::size_t n, std::size_t ld) {
  __m256 acc[NB][V];
#pragma GCC unroll 16
  for (std::size_t j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < V; ++v) acc[j][v] = _mm256_setzero_ps();
  for (std::size_t r = 0; r < rows; ++r) {
    __m256 xv[V];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < V; ++v) xv[v] = _mm256_loadu_ps(x + r * ld + p + v * 8);
#pragma GCC unroll 16
    for (std::size_t j = 0; j < NB; ++j) {
      const __m256 g = _mm256_broadcast_ss(dy + r * n + j0 + j);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < V; ++v) acc[j][v] = _mm256_fmadd_ps(g, xv[v], acc[j][v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < V; ++v) {
      float* out = dw + (j0 + j) * ld + p + v * 8;
      _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), acc[j][v]));
    }
}

// Outputs per block: 12 accumulators at V = 2, with the x vectors and a broadcast in registers.
constexpr std::size_t kWeightOutputs = 6;
using WeightsBlockFn = void (*)(const float*, const float*, float*, std::size_t, std::size_t, std::size_t,
                                std::size_t, std::size_t);
template <std::size_t V, std::size_t... NB>
WeightsBlockFn pick_weights_block(std::size_t nb, std::index_sequence<NB...>) {
  WeightsBlockFn fn = nullptr;
  ((fn = nb == NB + 1 ? &weights_block<NB + 1, V> : fn), ...);
  return fn;
}

// Rows per block of the weight gradient: 8 sequential streams through x at a time (a column
// walk down all m rows, one cache line per row, ran at 30% of the read bandwidth: rows one
// stride apart map to few L1 sets and defeat the prefetchers).
constexpr std::size_t kWeightRows = 8;
// Longer row segments than kChunk: each is a fresh stream for the hardware prefetcher (dw's
// slice, n x 16 KB, still fits L2).
constexpr std::size_t kWeightChunk = 4096;

}  // namespace

void f32_narrow_linear_forward__avx2(const float* x, const float* w, float* y, std::size_t m, std::size_t k,
                                     std::size_t n, std::size_t ld) {
  std::fill(y, y + m * n, 0.0f);
  const std::size_t kv = k / 8 * 8;
  // Chunks of k outer, rows inner: w's slice is read from memory once, not once per row block.
  for (std::size_t k0 = 0; k0 < kv; k0 += kChunk) {
    const std::size_t k1 = std::min(k0 + kChunk, kv);
    std::size_t i = 0;
    for (; i + 3 <= m; i += 3) forward_rows<3>(x + i * ld, w, y + i * n, k0, k1, n, ld);
    for (; i < m; ++i) forward_rows<1>(x + i * ld, w, y + i * n, k0, k1, n, ld);
  }
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t p = kv; p < k; ++p) y[i * n + j] += x[i * ld + p] * w[j * ld + p];
}

void f32_narrow_linear_backward_data__avx2(const float* dy, const float* w, float* dx, std::size_t m,
                                           std::size_t k, std::size_t n, std::size_t ld) {
  const std::size_t kv = k / 8 * 8;
  const bool aligned = reinterpret_cast<std::uintptr_t>(dx) % 32 == 0 && ld % 8 == 0;
  if (aligned && m * kv * sizeof(float) >= kStreamBytes)
    data_all<true>(dy, w, dx, m, kv, n, ld);
  else
    data_all<false>(dy, w, dx, m, kv, n, ld);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = kv; p < k; ++p) {
      float acc = 0.0f;
      for (std::size_t j = 0; j < n; ++j) acc += dy[i * n + j] * w[j * ld + p];
      dx[i * ld + p] = acc;
    }
}

void f32_narrow_linear_backward_weights__avx2(const float* x, const float* dy, float* dw, std::size_t m,
                                              std::size_t k, std::size_t n, std::size_t ld) {
  for (std::size_t j = 0; j < n; ++j) std::fill(dw + j * ld, dw + j * ld + k, 0.0f);
  const std::size_t kv = k / 8 * 8;
  // Output blocks as even as n allows (10 -> 5 + 5).
  const std::size_t blocks = (n + kWeightOutputs - 1) / kWeightOutputs;
  WeightsBlockFn wide[(kNarrowLinearMaxOutputs + kWeightOutputs - 1) / kWeightOutputs],
      narrow[(kNarrowLinearMaxOutputs + kWeightOutputs - 1) / kWeightOutputs];
  std::size_t first[(kNarrowLinearMaxOutputs + kWeightOutputs - 1) / kWeightOutputs + 1];
  for (std::size_t b = 0; b <= blocks; ++b) first[b] = n * b / blocks;
  for (std::size_t b = 0; b < blocks; ++b) {
    wide[b] = pick_weights_block<2>(first[b + 1] - first[b], std::make_index_sequence<kWeightOutputs>());
    narrow[b] = pick_weights_block<1>(first[b + 1] - first[b], std::make_index_sequence<kWeightOutputs>());
  }
  // Chunks of k outer (dw's slice stays in L2), blocks of rows inner.
  for (std::size_t k0 = 0; k0 < kv; k0 += kWeightChunk) {
    const std::size_t k1 = std::min(k0 + kWeightChunk, kv);
    for (std::size_t i0 = 0; i0 < m; i0 += kWeightRows) {
      const std::size_t rows = std::min(kWeightRows, m - i0);
      std::size_t p = k0;
      for (; p + 16 <= k1; p += 16)
        for (std::size_t b = 0; b < blocks; ++b)
          wide[b](x + i0 * ld, dy + i0 * n, dw, rows, p, first[b], n, ld);
      for (; p < k1; p += 8)
        for (std::size_t b = 0; b < blocks; ++b)
          narrow[b](x + i0 * ld, dy + i0 * n, dw, rows, p, first[b], n, ld);
    }
  }
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t q = kv; q < k; ++q) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < m; ++i) acc += dy[i * n + j] * x[i * ld + q];
      dw[j * ld + q] = acc;
    }
}

}  // namespace cpudl::kernels
