// Helpers shared by the LLM weight products of every ISA file of this family (avx2.cpp and
// int8_products.inl), in an anonymous namespace so that each ISA object keeps its own copy.
#include <immintrin.h>

#include <cstring>

#include "kernels/quant/ggml_blocks.h"
#include "kernels/quant/quant.h"

namespace cpudl::kernels {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float half(std::uint16_t h) { return _cvtsh_ss(h); }

template <class X>
const X* row(const void* base, std::size_t bytes, std::size_t i) {
  return reinterpret_cast<const X*>(static_cast<const char*>(base) + i * bytes);
}

// How far ahead of the current block the row loops prefetch.
constexpr std::size_t kPrefetchBytes = 1024;

// The rows of `a` from `first` on, as arguments of their own (what the four-stream loops leave).
WeightMatmulArgs rows_from(const WeightMatmulArgs& a, std::size_t first) {
  WeightMatmulArgs rest = a;
  rest.w = row<char>(a.w, a.w_row_bytes, first);
  rest.y = a.y + first;
  rest.rows = a.rows - first;
  return rest;
}

}  // namespace
}  // namespace cpudl::kernels
