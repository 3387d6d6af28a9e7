// The LLM prompt product on AMX tiles (kernel_types.h's Q8_0x16Block): Q8_0 and Q4_0 weights
// repacked sixteen rows at a time, Q8 activation rows read in place as the A tile (one block of
// 32 signed bytes per token row, x_row_bytes apart), TDPBSSD per block of 32 values into an int32
// tile, then each block's sums scaled by the two block scales into float accumulators (ggml's
// arithmetic: the same rounding as llama.cpp's products). Built with AMX-TILE/AMX-INT8 and
// AVX-512 flags; chosen only where the OS granted tile data (runtime/cpu_features.cpp).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/quant/ggml_blocks.h"
#include "kernels/quant/quant.h"

namespace cpudl::kernels {
namespace {

// Tile registers: C = tmm0 (16 tokens x 16 rows of int32), A = tmm1 (tokens x 32 bytes), B = tmm2
// (8 x 64 bytes), and a second set at tmm3-5. GCC's tile intrinsics paste their register numbers
// into the assembly, so the calls below spell them as literals.
constexpr int kC = 0, kA = 1, kB = 2;

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

void configure(int tokens) {
  TileConfig c;
  for (int pair : {0, 3}) {  // (C, A, B) = (tmm0, tmm1, tmm2) and (tmm3, tmm4, tmm5)
    c.rows[pair + kC] = static_cast<std::uint8_t>(tokens);
    c.colsb[pair + kC] = 64;
    c.rows[pair + kA] = static_cast<std::uint8_t>(tokens);
    c.colsb[pair + kA] = 32;
    c.rows[pair + kB] = 8;
    c.colsb[pair + kB] = 64;
  }
  _tile_loadconfig(&c);
}

// Adds block b's int32 sums (a 16 x 16 tile stored at `sums`), scaled by the two block scales,
// into the float accumulators of `count` tokens.
template <int kMax>
inline void scale_into(__m512 (&acc)[kMax], const std::int32_t (*sums)[16], const float* dw_row,
                       const char* a, std::size_t x_row_bytes, int count) {
  const __m512 dw = _mm512_loadu_ps(dw_row);
  for (int m = 0; m < count; ++m) {
    const float da = reinterpret_cast<const BlockQ8A*>(a + static_cast<std::size_t>(m) * x_row_bytes)->d;
    const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(sums[m]));
    acc[m] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[m]);
  }
}

// y rows [t0, t0 + n) (n <= 16, the configured tile height) for the panel's rows. Blocks go in
// pairs on two C tiles (tmm0, tmm3) with their own A and B tiles, so that the tile unit works on
// one block while the vector units scale the other's sums.
template <int kTokens>
void tile_rows(const Q8_0x16Block* panel, std::size_t blocks, const char* x, std::size_t x_row_bytes, int n,
               float* y, std::size_t ldy, int rows) {
  constexpr int kMax = kTokens == 0 ? 16 : kTokens;
  const int count = kTokens == 0 ? n : kTokens;
  const long stride = static_cast<long>(x_row_bytes);
  __m512 acc[kMax];
  for (int m = 0; m < kMax; ++m) acc[m] = _mm512_setzero_ps();
  alignas(64) std::int32_t sums[2][16][16];
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const char* a0 = x + b * sizeof(BlockQ8A);
    const char* a1 = a0 + sizeof(BlockQ8A);
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(1, a0 + offsetof(BlockQ8A, qs), stride);
    _tile_loadd(2, panel[b].q, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_loadd(4, a1 + offsetof(BlockQ8A, qs), stride);
    _tile_loadd(5, panel[b + 1].q, 64);
    _tile_dpbssd(3, 4, 5);
    _tile_stored(0, sums[0], 64);
    _tile_stored(3, sums[1], 64);
    scale_into(acc, sums[0], panel[b].d, a0, x_row_bytes, count);
    scale_into(acc, sums[1], panel[b + 1].d, a1, x_row_bytes, count);
  }
  if (b < blocks) {
    const char* a0 = x + b * sizeof(BlockQ8A);
    _tile_zero(0);
    _tile_loadd(1, a0 + offsetof(BlockQ8A, qs), stride);
    _tile_loadd(2, panel[b].q, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, sums[0], 64);
    scale_into(acc, sums[0], panel[b].d, a0, x_row_bytes, count);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
  for (int m = 0; m < count; ++m) _mm512_mask_storeu_ps(y + static_cast<std::size_t>(m) * ldy, keep, acc[m]);
}

}  // namespace

void q8_0x16_q8a_gemm__amx(const Q8_0x16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                           std::size_t tokens, float* y, std::size_t ldy, int rows) {
  const std::size_t blocks = k / 32, full = tokens / 16 * 16;
  const char* base = static_cast<const char*>(x);
  if (full > 0) {
    configure(16);
    for (std::size_t t = 0; t < full; t += 16)
      tile_rows<16>(panel, blocks, base + t * x_row_bytes, x_row_bytes, 16, y + t * ldy, ldy, rows);
  }
  if (const int tail = static_cast<int>(tokens - full); tail > 0) {
    configure(tail);
    tile_rows<0>(panel, blocks, base + full * x_row_bytes, x_row_bytes, tail, y + full * ldy, ldy, rows);
  }
  _tile_release();
}

}  // namespace cpudl::kernels
