// The packed GEMM microkernel over the SIMD traits V (GemmTileArgs, kernel_types.h): C[rows x
// cols] (+)= A sliver (Mr rows, a[p * Mr + i]) x B sliver (two vectors, b[p * 2W + j]), the C
// tile in 2 Mr accumulators. Per k step two B loads and Mr broadcast FMAs; avx2.cpp (6x16: 12
// ymm accumulators, 12 FMAs per 8 loads) and avx512.cpp (14x32: 28 zmm accumulators, enough
// chains for two FMA pipes of latency 4 with 4 registers left) include it after their traits.
//
// Edges are the tile's own: the row count is a template parameter (a 16-row product runs a
// 14-row and a 2-row tile, not two of 14) and partial columns are masked loads and stores, so
// partial tiles are written in place; full-width tiles keep plain moves (the masked ones cost
// 3-6% in L1 on AVX-512, more with AVX2's VMASKMOV).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace cpudl::kernels {
namespace {

template <class V, int Mr, int Rows, bool Full>
void gemm_tile(const GemmTileArgs& t) {
  constexpr int W = V::kWidth;
  // The wide tile's k loop is long enough to wait on C's lines and on A's stream from L2:
  // both are fetched ahead (C's lines are needed only after the loop).
  constexpr bool kPrefetch = Mr > 8;
  const auto n0 = static_cast<std::size_t>(std::clamp(t.cols, 0, W));
  const auto n1 = static_cast<std::size_t>(std::clamp(t.cols - W, 0, W));
  const auto load = [](const float* p, std::size_t n) {
    if constexpr (Full)
      return V::load(p);
    else
      return V::load_partial(p, n);
  };
  const auto store = [](float* p, typename V::F v, std::size_t n) {
    if constexpr (Full)
      V::store(p, v);
    else
      V::store_partial(p, v, n);
  };
  const float* a = t.a;
  const float* b = t.b;
  typename V::F acc[Rows][2];
#pragma GCC unroll 14
  for (int i = 0; i < Rows; ++i) {
    acc[i][0] = acc[i][1] = V::zero();
    if constexpr (kPrefetch) {
      __builtin_prefetch(t.c + i * t.ldc, 0, 3);
      __builtin_prefetch(t.c + i * t.ldc + t.cols - 1, 0, 3);
    }
  }
  for (std::int64_t p = 0; p < t.k; ++p) {
    const typename V::F b0 = load(b, n0), b1 = load(b + W, n1);
    if constexpr (kPrefetch) __builtin_prefetch(a + Mr * 8, 0, 3);  // A, 8 steps ahead
#pragma GCC unroll 14
    for (int i = 0; i < Rows; ++i) {
      const typename V::F ai = V::set1(a[i]);
      acc[i][0] = V::fma(ai, b0, acc[i][0]);
      acc[i][1] = V::fma(ai, b1, acc[i][1]);
    }
    a += Mr;
    b += 2 * W;
  }
#pragma GCC unroll 14
  for (int i = 0; i < Rows; ++i) {
    float* ci = t.c + i * t.ldc;
    typename V::F r0 = acc[i][0], r1 = acc[i][1];
    if (t.accumulate) {
      r0 = V::add(r0, load(ci, n0));
      r1 = V::add(r1, load(ci + W, n1));
    }
    store(ci, r0, n0);
    store(ci + W, r1, n1);
  }
}

template <class V, int Mr, int Rows>
void gemm_tile_rows(const GemmTileArgs& t) {
  if (t.cols == 2 * V::kWidth)
    gemm_tile<V, Mr, Rows, true>(t);
  else
    gemm_tile<V, Mr, Rows, false>(t);
}

template <class V, int Mr, int... Rows>
void gemm_tile_of_rows(const GemmTileArgs& t, std::integer_sequence<int, Rows...>) {
  using Fn = void (*)(const GemmTileArgs&);
  static constexpr Fn kTiles[] = {gemm_tile_rows<V, Mr, Rows + 1>...};
  kTiles[t.rows - 1](t);
}

// The kernel table's entry: rows 1..Mr, cols 1..2W (nothing for an empty tile).
template <class V, int Mr>
void gemm_tile_any(const GemmTileArgs& t) {
  if (t.rows <= 0 || t.cols <= 0) return;
  gemm_tile_of_rows<V, Mr>(t, std::make_integer_sequence<int, Mr>{});
}

}  // namespace
}  // namespace cpudl::kernels
