// Narrow linear kernels (narrow.h), written once over the SIMD traits V and compiled per ISA by
// avx2.cpp / avx512.cpp, which define V and CPUDL_ISA before including this file. Each walks the
// m x k activation (or its gradient) in storage order, k in chunks whose slice of w stays in
// L1/L2 while every row passes over it, with register blocks sized so that each loaded vector
// feeds several FMAs.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/narrow/narrow.h"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {
namespace {

using F = V::F;
constexpr std::size_t W = V::kWidth;

// Columns per chunk: w's slice (n <= 16 rows of it) stays in L2, a block's x rows in L1.
constexpr std::size_t kChunk = 1024;
// Register blocks: the forward's rows x outputs and the weight gradient's vectors per output fill
// the 16 (AVX2) or 32 (AVX-512) registers; in cache (the fused first layer) the FMAs bind, and
// each loaded vector then feeds more of them.
constexpr bool kWide = W == 16;
constexpr std::size_t kForwardRows = kWide ? 4 : 3, kForwardOutputs = kWide ? 5 : 4,
                      kWeightVectors = kWide ? 4 : 2, kDataVectors = kWide ? 6 : 3;

// y[r][c] += x[r] . w[c] over columns [k0, k1) (a multiple of W long), R rows x C outputs in
// registers: per W columns R x loads and C w loads feed R * C FMAs.
template <std::size_t R, std::size_t C>
void forward_block(const float* const* xr, const float* const* wr, std::size_t k0, std::size_t k1, float* y,
                   std::size_t n) {
  F acc[R][C];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) acc[r][c] = V::zero();
  for (std::size_t p = k0; p < k1; p += W) {
    F xv[R];
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) xv[r] = V::load(xr[r] + p);
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) {
      const F wv = V::load(wr[c] + p);
#pragma GCC unroll 16
      for (std::size_t r = 0; r < R; ++r) acc[r][c] = V::fma(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t c = 0; c < C; ++c) y[r * n + c] += V::reduce_add(acc[r][c]);
}

template <std::size_t R>
void forward_rows(const float* x, const float* w, float* y, std::size_t k0, std::size_t k1, std::size_t n,
                  std::size_t ld) {
  const float* xr[R];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r) xr[r] = x + r * ld;
  std::size_t j = 0;
  for (; j + kForwardOutputs <= n; j += kForwardOutputs) {
    const float* wr[kForwardOutputs];
#pragma GCC unroll 16
    for (std::size_t c = 0; c < kForwardOutputs; ++c) wr[c] = w + (j + c) * ld;
    forward_block<R, kForwardOutputs>(xr, wr, k0, k1, y + j, n);
  }
  for (; j < n; ++j) {
    const float* wr[1] = {w + j * ld};
    forward_block<R, 1>(xr, wr, k0, k1, y + j, n);
  }
}

// dx[r][p..] = sum_j dy[r][j] w[j][p..] for R rows x NV vectors of columns at p; with Stream,
// non-temporal stores (dx aligned to V::kAlignment).
template <std::size_t R, std::size_t NV, bool Stream>
void data_block(const float* dy, const float* w, float* dx, std::size_t p, std::size_t n, std::size_t ld) {
  F acc[R][NV];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = V::zero();
  for (std::size_t j = 0; j < n; ++j) {
    F wv[NV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) wv[v] = V::load(w + j * ld + p + v * W);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
      const F g = V::set1(dy[r * n + j]);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < NV; ++v) acc[r][v] = V::fma(g, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) {
      if constexpr (Stream)
        V::stream(dx + r * ld + p + v * W, acc[r][v]);
      else
        V::store(dx + r * ld + p + v * W, acc[r][v]);
    }
}

template <std::size_t R, bool Stream>
void data_rows(const float* dy, const float* w, float* dx, std::size_t k0, std::size_t k1, std::size_t n,
               std::size_t ld) {
  std::size_t p = k0;
  for (; p + kDataVectors * W <= k1; p += kDataVectors * W)
    data_block<R, kDataVectors, Stream>(dy, w, dx, p, n, ld);
  for (; p + W <= k1; p += W) data_block<R, 1, Stream>(dy, w, dx, p, n, ld);
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
  if constexpr (Stream) V::fence();
}

// dw[j0 + j][p .. p + 8V) += sum over `rows` rows of dy[i][j0 + j] * x[i][p ..] for NB outputs:
// the rows' NV x vectors (L1 after the first output block) each feed NB FMAs with broadcast
// gradients, NB * NV independent sums (NV = 1 left 5 chains one FMA latency apart per row: 22% of
// the roof in cache); the sums go into dw once per block of rows.
template <std::size_t NB, std::size_t NV>
void weights_block(const float* x, const float* dy, float* dw, std::size_t rows, std::size_t p,
                   std::size_t j0, std::size_t n, std::size_t ld) {
  F acc[NB][NV];
#pragma GCC unroll 16
  for (std::size_t j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) acc[j][v] = V::zero();
  for (std::size_t r = 0; r < rows; ++r) {
    F xv[NV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) xv[v] = V::load(x + r * ld + p + v * W);
#pragma GCC unroll 16
    for (std::size_t j = 0; j < NB; ++j) {
      const F g = V::set1(dy[r * n + j0 + j]);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < NV; ++v) acc[j][v] = V::fma(g, xv[v], acc[j][v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t j = 0; j < NB; ++j)
#pragma GCC unroll 16
    for (std::size_t v = 0; v < NV; ++v) {
      float* out = dw + (j0 + j) * ld + p + v * W;
      V::store(out, V::add(V::load(out), acc[j][v]));
    }
}

// Outputs per block: up to 6 x kWeightVectors accumulators, with the x vectors and a broadcast in
// registers.
constexpr std::size_t kWeightOutputs = 6;
using WeightsBlockFn = void (*)(const float*, const float*, float*, std::size_t, std::size_t, std::size_t,
                                std::size_t, std::size_t);
template <std::size_t NV, std::size_t... NB>
WeightsBlockFn pick_weights_block(std::size_t nb, std::index_sequence<NB...>) {
  WeightsBlockFn fn = nullptr;
  ((fn = nb == NB + 1 ? &weights_block<NB + 1, NV> : fn), ...);
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

void CPUDL_KERNEL(f32_narrow_linear_forward)(const float* x, const float* w, float* y, std::size_t m,
                                             std::size_t k, std::size_t n, std::size_t ld) {
  std::fill(y, y + m * n, 0.0f);
  const std::size_t kv = k / W * W;
  // Chunks of k outer, rows inner: w's slice is read from memory once, not once per row block.
  for (std::size_t k0 = 0; k0 < kv; k0 += kChunk) {
    const std::size_t k1 = std::min(k0 + kChunk, kv);
    std::size_t i = 0;
    for (; i + kForwardRows <= m; i += kForwardRows)
      forward_rows<kForwardRows>(x + i * ld, w, y + i * n, k0, k1, n, ld);
    for (; i < m; ++i) forward_rows<1>(x + i * ld, w, y + i * n, k0, k1, n, ld);
  }
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t p = kv; p < k; ++p) y[i * n + j] += x[i * ld + p] * w[j * ld + p];
}

void CPUDL_KERNEL(f32_narrow_linear_backward_data)(const float* dy, const float* w, float* dx, std::size_t m,
                                                   std::size_t k, std::size_t n, std::size_t ld) {
  const std::size_t kv = k / W * W;
  const bool aligned = reinterpret_cast<std::uintptr_t>(dx) % V::kAlignment == 0 && ld % W == 0;
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

void CPUDL_KERNEL(f32_narrow_linear_backward_weights)(const float* x, const float* dy, float* dw,
                                                      std::size_t m, std::size_t k, std::size_t n,
                                                      std::size_t ld) {
  const std::size_t kv = k / W * W;
  // Output blocks as even as n allows (10 -> 5 + 5).
  const std::size_t blocks = (n + kWeightOutputs - 1) / kWeightOutputs;
  WeightsBlockFn wide[(kNarrowLinearMaxOutputs + kWeightOutputs - 1) / kWeightOutputs],
      narrow[(kNarrowLinearMaxOutputs + kWeightOutputs - 1) / kWeightOutputs];
  std::size_t first[(kNarrowLinearMaxOutputs + kWeightOutputs - 1) / kWeightOutputs + 1];
  for (std::size_t b = 0; b <= blocks; ++b) first[b] = n * b / blocks;
  for (std::size_t b = 0; b < blocks; ++b) {
    wide[b] = pick_weights_block<kWeightVectors>(first[b + 1] - first[b],
                                                 std::make_index_sequence<kWeightOutputs>());
    narrow[b] = pick_weights_block<1>(first[b + 1] - first[b], std::make_index_sequence<kWeightOutputs>());
  }
  // Chunks of k outer (dw's slice stays in L2), blocks of rows inner.
  for (std::size_t k0 = 0; k0 < kv; k0 += kWeightChunk) {
    const std::size_t k1 = std::min(k0 + kWeightChunk, kv);
    for (std::size_t i0 = 0; i0 < m; i0 += kWeightRows) {
      const std::size_t rows = std::min(kWeightRows, m - i0);
      std::size_t p = k0;
      for (; p + kWeightVectors * W <= k1; p += kWeightVectors * W)
        for (std::size_t b = 0; b < blocks; ++b)
          wide[b](x + i0 * ld, dy + i0 * n, dw, rows, p, first[b], n, ld);
      for (; p < k1; p += W)
        for (std::size_t b = 0; b < blocks; ++b)
          narrow[b](x + i0 * ld, dy + i0 * n, dw, rows, p, first[b], n, ld);
    }
  }
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t q = kv; q < k; ++q) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < m; ++i) acc += dy[i * n + j] * x[i * ld + q];
      dw[j * ld + q] += acc;
    }
}

}  // namespace cpudl::kernels
