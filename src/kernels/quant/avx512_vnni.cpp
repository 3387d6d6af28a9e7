// AVX512-VNNI integer LLM weight products (bodies shared in int8_products.inl): Q8_0, Q4_0 and
// the Q4_0 and Q8_0 prompt panels with one VPDPBUSD per 32 byte pairs instead of VPMADDUBSW + VPMADDWD +
// VPADDD, on 256-bit vectors (AVX512-VL): the blocks are 32 values. The float and K-quant
// products have no VNNI form here; AVX-512 CPUs run their AVX2 variants.
#define CPUDL_ISA avx512_vnni
#define CPUDL_QUANT_VNNI 1
#include "kernels/quant/int8_products.inl"

#include <array>
#include <utility>

// Generation over the AMX tile panels (kernel_types.h's Q8_0x16Block, repacked at load): one
// token against sixteen rows per 512-bit VPDPBUSD, where the row-major kernel above spends a
// scalar scale conversion and a 256-bit product per row and block. VPDPBUSD multiplies unsigned
// by signed bytes: the activation bytes go in as x + 128 (XOR 0x80) and each block takes back
// 128 times its weights' sums, which a second VPDPBUSD against ones gives on the way. Four row
// groups at once: four memory streams the prefetchers follow, one activation broadcast for all.
namespace cpudl::kernels {
namespace {

// The gemvs' results: kGroups sums of 16 rows each, the last group cut at `rows`.
template <int kGroups>
void store_groups(const __m512 (&acc)[kGroups], float* y, std::size_t rows) {
  for (int g = 0; g < kGroups; ++g) {
    const std::size_t first = static_cast<std::size_t>(g) * 16;
    if (first >= rows) break;
    const std::size_t n = rows - first < 16 ? rows - first : 16;
    _mm512_mask_storeu_ps(y + first, static_cast<__mmask16>((1u << n) - 1), acc[g]);
  }
}

// A gemv over a panel's 16-row groups: four groups at a time (four memory streams, one activation
// broadcast for all), then the rest one by one; kValues columns per panel block.
template <class Panel, class XBlock>
using GroupsFn = void (*)(const Panel*, std::size_t, const XBlock*, float*, std::size_t);
template <class Panel, class XBlock, std::size_t kValues>
void gemv_over_groups(GroupsFn<Panel, XBlock> four, GroupsFn<Panel, XBlock> one, const Panel* panel,
                      std::size_t k, const void* x, float* y, std::size_t rows) {
  const std::size_t blocks = k / kValues, groups = (rows + 15) / 16;
  const auto* xb = static_cast<const XBlock*>(x);
  std::size_t g = 0;
  for (; g + 4 <= groups; g += 4) four(panel + g * blocks, blocks, xb, y + g * 16, rows - g * 16);
  for (; g < groups; ++g) one(panel + g * blocks, blocks, xb, y + g * 16, rows - g * 16);
}

template <int kGroups>
void gemv_groups(const Q8_0x16Block* panel, std::size_t blocks, const BlockQ8A* x, float* y,
                 std::size_t rows) {
  const __m512i flip = _mm512_set1_epi32(static_cast<int>(0x80808080u)), ones = _mm512_set1_epi8(1);
  __m512 acc[kGroups];
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512i dot[kGroups], wsum[kGroups];
    for (int g = 0; g < kGroups; ++g) dot[g] = wsum[g] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      std::int32_t four;
      std::memcpy(&four, x[b].qs + 4 * j, 4);
      const __m512i xu = _mm512_xor_si512(_mm512_set1_epi32(four), flip);
      for (int g = 0; g < kGroups; ++g) {
        const __m512i w = _mm512_loadu_si512(panel[static_cast<std::size_t>(g) * blocks + b].q[j]);
        dot[g] = _mm512_dpbusd_epi32(dot[g], xu, w);
        wsum[g] = _mm512_dpbusd_epi32(wsum[g], ones, w);
      }
    }
    const __m512 dx = _mm512_set1_ps(x[b].d);
    for (int g = 0; g < kGroups; ++g) {
      const __m512i exact = _mm512_sub_epi32(dot[g], _mm512_slli_epi32(wsum[g], 7));
      const __m512 scale =
          _mm512_mul_ps(_mm512_loadu_ps(panel[static_cast<std::size_t>(g) * blocks + b].d), dx);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), scale, acc[g]);
    }
  }
  store_groups<kGroups>(acc, y, rows);
}

// A panel block's column groups 2c and 2c + 1, each as 16 rows x 4 unsigned bytes, the form
// VPDPBUSD takes against the signed activation bytes: Q8_0 XOR 0x80 (a bias of 128); Q4_0
// (kernel_types.h's Q4_0x16Block) its chunk c's two nibble planes (a bias of 8). The bias comes
// back out as the bias times the activation block's sum.
inline void unsigned_pair(const Q8_0x16Block& p, int c, __m512i& first, __m512i& second) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  first = _mm512_xor_si512(_mm512_loadu_si512(p.q[2 * c]), flip);
  second = _mm512_xor_si512(_mm512_loadu_si512(p.q[2 * c + 1]), flip);
}
inline void unsigned_pair(const Q4_0x16Block& p, int c, __m512i& first, __m512i& second) {
  const __m512i v = _mm512_loadu_si512(p.q[c]), low = _mm512_set1_epi8(0x0F);
  first = _mm512_and_si512(v, low);
  second = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
}
inline __m512 row_scales(const Q8_0x16Block& p) { return _mm512_loadu_ps(p.d); }
inline __m512 row_scales(const Q4_0x16Block& p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
}
inline __m512i broadcast_four(const BlockQ8A& x, int j) {
  std::int32_t four;
  std::memcpy(&four, x.qs + 4 * j, 4);
  return _mm512_set1_epi32(four);
}

// Q4_0 (kernel_types.h's Q4_0x16Block): per chunk, one 512-bit load; its low nibbles are one
// column group, unsigned as VPDPBUSD takes them, and its high nibbles masked in place (16 times
// the values, no shift) the next, into a second sum shifted back by 4 at the end of the block --
// exact, as every term is a multiple of 16. Two sums also halve the chain of dependent
// VPDPBUSDs. The offset of 8 comes back as 8 times the activation block's sum.
template <int kGroups>
void gemv_groups_q4(const Q4_0x16Block* panel, std::size_t blocks, const BlockQ8A* x, float* y,
                    std::size_t rows) {
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc[kGroups];
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512i dot_low[kGroups], dot_high[kGroups];
    const __m512i offset = _mm512_set1_epi32(-8 * x[b].sum);
    for (int g = 0; g < kGroups; ++g) {
      dot_low[g] = offset;
      dot_high[g] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; ++c) {
      const __m512i x_low = broadcast_four(x[b], 2 * c), x_high = broadcast_four(x[b], 2 * c + 1);
      for (int g = 0; g < kGroups; ++g) {
        const __m512i v = _mm512_loadu_si512(panel[static_cast<std::size_t>(g) * blocks + b].q[c]);
        dot_low[g] = _mm512_dpbusd_epi32(dot_low[g], _mm512_and_si512(v, low), x_low);
        dot_high[g] = _mm512_dpbusd_epi32(dot_high[g], _mm512_and_si512(v, high), x_high);
      }
    }
    const __m512 dx = _mm512_set1_ps(x[b].d);
    for (int g = 0; g < kGroups; ++g) {
      const __m512i dot = _mm512_add_epi32(dot_low[g], _mm512_srai_epi32(dot_high[g], 4));
      const __m512 dw = row_scales(panel[static_cast<std::size_t>(g) * blocks + b]);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx), acc[g]);
    }
  }
  store_groups<kGroups>(acc, y, rows);
}

// Q4_K generation panels (kernel_types.h's Q4_Kx16Block): per 32-value sub-block, the nibble
// chunks go through VPDPBUSD as Q4_0's do (low plane unsigned as stored, high plane masked in
// place into a second sum shifted back by 4), and the exact integer sub-block product is scaled
// by the rows' 6-bit scales in int32 (VPMULLD), the mins by the sub-block's activation sum; per
// 256-value block one conversion to float with d and dmin. The row kernel (avx2.cpp) unpacks
// the packed scales of every row and block on every token and spends a byte shuffle and a
// VPMADDWD per 32 values on one row, here one VPMULLD serves 16 rows.
template <int kGroups>
void gemv_groups_q4_k(const Q4_Kx16Block* panel, std::size_t blocks, const BlockQ8_K* x, float* y,
                      std::size_t rows) {
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc[kGroups];
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512i scaled[kGroups], mins[kGroups];
    for (int g = 0; g < kGroups; ++g) scaled[g] = mins[g] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i dot_low[kGroups], dot_high[kGroups];
      for (int g = 0; g < kGroups; ++g) dot_low[g] = dot_high[g] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        std::int32_t four_low, four_high;
        std::memcpy(&four_low, x[b].qs + 32 * j + 8 * c, 4);
        std::memcpy(&four_high, x[b].qs + 32 * j + 8 * c + 4, 4);
        const __m512i x_low = _mm512_set1_epi32(four_low), x_high = _mm512_set1_epi32(four_high);
        for (int g = 0; g < kGroups; ++g) {
          const __m512i v = _mm512_loadu_si512(panel[static_cast<std::size_t>(g) * blocks + b].q[j][c]);
          dot_low[g] = _mm512_dpbusd_epi32(dot_low[g], _mm512_and_si512(v, low), x_low);
          dot_high[g] = _mm512_dpbusd_epi32(dot_high[g], _mm512_and_si512(v, high), x_high);
        }
      }
      const __m512i sum = _mm512_set1_epi32(x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
      for (int g = 0; g < kGroups; ++g) {
        const Q4_Kx16Block& p = panel[static_cast<std::size_t>(g) * blocks + b];
        const __m512i dot = _mm512_add_epi32(dot_low[g], _mm512_srai_epi32(dot_high[g], 4));
        const __m512i scale =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales[j])));
        const __m512i min =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.mins[j])));
        scaled[g] = _mm512_add_epi32(scaled[g], _mm512_mullo_epi32(dot, scale));
        mins[g] = _mm512_add_epi32(mins[g], _mm512_mullo_epi32(min, sum));
      }
    }
    const __m512 dx = _mm512_set1_ps(x[b].d);
    for (int g = 0; g < kGroups; ++g) {
      const Q4_Kx16Block& p = panel[static_cast<std::size_t>(g) * blocks + b];
      const __m512 d =
          _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d))), dx);
      const __m512 dmin =
          _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.dmin))), dx);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled[g]), d, acc[g]);
      acc[g] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[g]), dmin, acc[g]);
    }
  }
  store_groups<kGroups>(acc, y, rows);
}

// Several tokens against one Q4_K group (prompts): each sub-block's four chunks are split into
// their nibble planes once (8 vectors) and serve every token of the tile, whose activations are
// broadcast 4 bytes at a time; per token the exact integer sub-block products are scaled (and the
// mins applied to its Q8_K sub-block sums) in int32 as in the gemv, then once per 256 values in
// float. Tokens four at a time (5 accumulators each beside the 8 planes).
template <int NT>
void q4_k_dot_tile(const Q4_Kx16Block* panel, std::size_t blocks, const BlockQ8_K* const* x, float* const* y,
                   int rows) {
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    const Q4_Kx16Block& p = panel[b];
    __m512i scaled[NT], mins[NT];
    for (int i = 0; i < NT; ++i) scaled[i] = mins[i] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i plane_low[4], plane_high[4];
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(p.q[j][c]);
        plane_low[c] = _mm512_and_si512(v, low);
        plane_high[c] = _mm512_and_si512(v, high);
      }
      const __m512i scale =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales[j])));
      const __m512i min = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.mins[j])));
      for (int i = 0; i < NT; ++i) {
        __m512i dot_low = _mm512_setzero_si512(), dot_high = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
          std::int32_t four_low, four_high;
          std::memcpy(&four_low, x[i][b].qs + 32 * j + 8 * c, 4);
          std::memcpy(&four_high, x[i][b].qs + 32 * j + 8 * c + 4, 4);
          dot_low = _mm512_dpbusd_epi32(dot_low, plane_low[c], _mm512_set1_epi32(four_low));
          dot_high = _mm512_dpbusd_epi32(dot_high, plane_high[c], _mm512_set1_epi32(four_high));
        }
        const __m512i dot = _mm512_add_epi32(dot_low, _mm512_srai_epi32(dot_high, 4));
        const __m512i sum = _mm512_set1_epi32(x[i][b].bsums[2 * j] + x[i][b].bsums[2 * j + 1]);
        scaled[i] = _mm512_add_epi32(scaled[i], _mm512_mullo_epi32(dot, scale));
        mins[i] = _mm512_add_epi32(mins[i], _mm512_mullo_epi32(min, sum));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.dmin)));
    for (int i = 0; i < NT; ++i) {
      const __m512 dx = _mm512_set1_ps(x[i][b].d);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled[i]), _mm512_mul_ps(d, dx), acc[i]);
      acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[i]), _mm512_mul_ps(dmin, dx), acc[i]);
    }
  }
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int i = 0; i < NT; ++i) _mm512_mask_storeu_ps(y[i], mask, acc[i]);
}

// Q6_K generation panels (kernel_types.h's Q6_Kx16Block): per 16-value sub-block, each group of
// 4 columns is its nibble plane (masked, or shifted down first for the chunk's high plane) ORed
// with its two high bits shifted into bits 4-5 (VPTERNLOGD: nibbles | (high & 0x30)), then one
// VPDPBUSD of the unsigned 6-bit values against the 4 activation bytes broadcast; the offset of
// 32 comes back out as 32 times the sub-block's activation sum (Q8_K's bsums), and the exact
// integer sub-block product is scaled by the rows' int8 scales in int32 (VPMULLD); per 256-value
// block one conversion to float with d. The row kernel (avx2.cpp) reads one row at a time and
// reached 17% of the bandwidth.
template <int kGroups>
void gemv_groups_q6_k(const Q6_Kx16Block* panel, std::size_t blocks, const BlockQ8_K* x, float* y,
                      std::size_t rows) {
  const __m512i nibble = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[kGroups];
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512i scaled[kGroups];
    for (int g = 0; g < kGroups; ++g) scaled[g] = _mm512_setzero_si512();
    for (int j = 0; j < 16; ++j) {
      __m512i four[4];
      for (int c = 0; c < 4; ++c) {
        std::int32_t v;
        std::memcpy(&v, x[b].qs + 16 * j + 4 * c, 4);
        four[c] = _mm512_set1_epi32(v);
      }
      const __m512i offset = _mm512_set1_epi32(32 * x[b].bsums[j]);
      for (int g = 0; g < kGroups; ++g) {
        const Q6_Kx16Block& p = panel[static_cast<std::size_t>(g) * blocks + b];
        const __m512i low0 = _mm512_loadu_si512(p.low[j][0]), low1 = _mm512_loadu_si512(p.low[j][1]);
        const __m512i high = _mm512_loadu_si512(p.high[j]);
        // nibbles | (high bits & 0x30): VPTERNLOGD's table for a | (b & c) is 0xF8.
        const __m512i q0 = _mm512_ternarylogic_epi32(_mm512_and_si512(low0, nibble),
                                                     _mm512_slli_epi16(high, 4), bits45, 0xF8);
        const __m512i q1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(low0, 4), nibble),
                                                     _mm512_slli_epi16(high, 2), bits45, 0xF8);
        const __m512i q2 = _mm512_ternarylogic_epi32(_mm512_and_si512(low1, nibble), high, bits45, 0xF8);
        const __m512i q3 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(low1, 4), nibble),
                                                     _mm512_srli_epi16(high, 2), bits45, 0xF8);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, four[0]);
        dot = _mm512_dpbusd_epi32(dot, q1, four[1]);
        dot = _mm512_dpbusd_epi32(dot, q2, four[2]);
        dot = _mm512_dpbusd_epi32(dot, q3, four[3]);
        const __m512i scale =
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales[j])));
        scaled[g] = _mm512_add_epi32(scaled[g], _mm512_mullo_epi32(_mm512_sub_epi32(dot, offset), scale));
      }
    }
    const __m512 dx = _mm512_set1_ps(x[b].d);
    for (int g = 0; g < kGroups; ++g) {
      const Q6_Kx16Block& p = panel[static_cast<std::size_t>(g) * blocks + b];
      const __m512 d =
          _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d))), dx);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled[g]), d, acc[g]);
    }
  }
  store_groups<kGroups>(acc, y, rows);
}

// Several tokens against one Q6_K group (prompts): each sub-block's 6-bit values are assembled
// once (four VPTERNLOGDs, as in the gemv) and serve every token of the tile of four.
template <int NT>
void q6_k_dot_tile(const Q6_Kx16Block* panel, std::size_t blocks, const BlockQ8_K* const* x, float* const* y,
                   int rows) {
  const __m512i nibble = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    const Q6_Kx16Block& p = panel[b];
    __m512i scaled[NT];
    for (int i = 0; i < NT; ++i) scaled[i] = _mm512_setzero_si512();
    for (int j = 0; j < 16; ++j) {
      const __m512i low0 = _mm512_loadu_si512(p.low[j][0]), low1 = _mm512_loadu_si512(p.low[j][1]);
      const __m512i high = _mm512_loadu_si512(p.high[j]);
      const __m512i q[4] = {
          _mm512_ternarylogic_epi32(_mm512_and_si512(low0, nibble), _mm512_slli_epi16(high, 4), bits45, 0xF8),
          _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(low0, 4), nibble),
                                    _mm512_slli_epi16(high, 2), bits45, 0xF8),
          _mm512_ternarylogic_epi32(_mm512_and_si512(low1, nibble), high, bits45, 0xF8),
          _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(low1, 4), nibble),
                                    _mm512_srli_epi16(high, 2), bits45, 0xF8)};
      const __m512i scale =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.scales[j])));
      for (int i = 0; i < NT; ++i) {
        __m512i dot = _mm512_set1_epi32(-32 * x[i][b].bsums[j]);
        for (int c = 0; c < 4; ++c) {
          std::int32_t v;
          std::memcpy(&v, x[i][b].qs + 16 * j + 4 * c, 4);
          dot = _mm512_dpbusd_epi32(dot, q[c], _mm512_set1_epi32(v));
        }
        scaled[i] = _mm512_add_epi32(scaled[i], _mm512_mullo_epi32(dot, scale));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
    for (int i = 0; i < NT; ++i)
      acc[i] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled[i]), _mm512_mul_ps(d, _mm512_set1_ps(x[i][b].d)), acc[i]);
  }
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int i = 0; i < NT; ++i) _mm512_mask_storeu_ps(y[i], mask, acc[i]);
}

// Tokens four at a time over one K-quant group.
template <class Panel, class Tile>
void k_quant_gemm(const std::array<Tile, 4>& tiles, const Panel* panel, std::size_t k, const void* x,
                  std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy, int rows) {
  const BlockQ8_K* xs[4];
  float* ys[4];
  for (std::size_t t = 0; t < tokens;) {
    const std::size_t n = tokens - t < 4 ? tokens - t : 4;
    for (std::size_t i = 0; i < n; ++i) {
      xs[i] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(x) + (t + i) * x_row_bytes);
      ys[i] = y + (t + i) * ldy;
    }
    tiles[n - 1](panel, k / 256, xs, ys, rows);
    t += n;
  }
}

// Several tokens against one 16-row group (prompts, and sequences decoding together), from the
// panels repacked at load, where the eight-row panels (int8_products.inl) are packed per call:
// the pack cost more than the product at four tokens (30% and 20% of a four-sequence Q8_0 pass).
// Per column group of a block, 16 rows x 4 values made unsigned (Q8_0: XOR 0x80, a bias of 128;
// Q4_0: a nibble plane, a bias of 8; unsigned_pair), then one VPDPBUSD per token against
// its 4 activation bytes broadcast; each token's bias comes back out as the bias times its
// activation block's sum.
template <int NT, int kBias, class Panel>
void dot_tile(const Panel* panel, std::size_t blocks, const BlockQ8A* const* x, float* const* y, int rows) {
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512i dot[NT];
    for (int i = 0; i < NT; ++i) dot[i] = _mm512_set1_epi32(-kBias * x[i][b].sum);
    for (int c = 0; c < 4; ++c) {
      __m512i first, second;
      unsigned_pair(panel[b], c, first, second);
      for (int i = 0; i < NT; ++i) {
        dot[i] = _mm512_dpbusd_epi32(dot[i], first, broadcast_four(x[i][b], 2 * c));
        dot[i] = _mm512_dpbusd_epi32(dot[i], second, broadcast_four(x[i][b], 2 * c + 1));
      }
    }
    const __m512 dw = row_scales(panel[b]);
    for (int i = 0; i < NT; ++i)
      acc[i] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), _mm512_mul_ps(dw, _mm512_set1_ps(x[i][b].d)), acc[i]);
  }
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int i = 0; i < NT; ++i) _mm512_mask_storeu_ps(y[i], mask, acc[i]);
}

// Tokens eight at a time (the group's weights, 576 bytes a block, stay in L1 across the tiles),
// the rest in one tile of their count.
template <int kBias, class Panel, int... N>
constexpr auto dot_tiles(std::integer_sequence<int, N...>) {
  return std::array{&dot_tile<N + 1, kBias, Panel>...};
}

template <int kBias, class Panel>
void dot_gemm(const Panel* panel, std::size_t k, const void* x, std::size_t x_row_bytes, std::size_t tokens,
              float* y, std::size_t ldy, int rows) {
  static constexpr auto kTiles = dot_tiles<kBias, Panel>(std::make_integer_sequence<int, 8>{});
  const std::size_t blocks = k / 32;
  const BlockQ8A* xs[8];
  float* ys[8];
  for (std::size_t t = 0; t < tokens;) {
    const std::size_t n = tokens - t < 8 ? tokens - t : 8;
    for (std::size_t i = 0; i < n; ++i) {
      xs[i] = reinterpret_cast<const BlockQ8A*>(static_cast<const char*>(x) + (t + i) * x_row_bytes);
      ys[i] = y + (t + i) * ldy;
    }
    kTiles[n - 1](panel, blocks, xs, ys, rows);
    t += n;
  }
}

}  // namespace

void q4_0x16_q8a_gemv__avx512_vnni(const Q4_0x16Block* panel, std::size_t k, const void* x, float* y,
                                   std::size_t rows) {
  gemv_over_groups<Q4_0x16Block, BlockQ8A, 32>(gemv_groups_q4<4>, gemv_groups_q4<1>, panel, k, x, y, rows);
}

void q4_kx16_q8_k_gemv__avx512_vnni(const Q4_Kx16Block* panel, std::size_t k, const void* x, float* y,
                                    std::size_t rows) {
  gemv_over_groups<Q4_Kx16Block, BlockQ8_K, 256>(gemv_groups_q4_k<4>, gemv_groups_q4_k<1>, panel, k, x, y,
                                                 rows);
}

void q4_kx16_q8_k_gemm__avx512_vnni(const Q4_Kx16Block* panel, std::size_t k, const void* x,
                                    std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                    int rows) {
  static constexpr std::array kTiles{&q4_k_dot_tile<1>, &q4_k_dot_tile<2>, &q4_k_dot_tile<3>,
                                     &q4_k_dot_tile<4>};
  k_quant_gemm(kTiles, panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

void q6_kx16_q8_k_gemm__avx512_vnni(const Q6_Kx16Block* panel, std::size_t k, const void* x,
                                    std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                    int rows) {
  static constexpr std::array kTiles{&q6_k_dot_tile<1>, &q6_k_dot_tile<2>, &q6_k_dot_tile<3>,
                                     &q6_k_dot_tile<4>};
  k_quant_gemm(kTiles, panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

void q6_kx16_q8_k_gemv__avx512_vnni(const Q6_Kx16Block* panel, std::size_t k, const void* x, float* y,
                                    std::size_t rows) {
  gemv_over_groups<Q6_Kx16Block, BlockQ8_K, 256>(gemv_groups_q6_k<4>, gemv_groups_q6_k<1>, panel, k, x, y,
                                                 rows);
}

void q8_0x16_q8a_gemv__avx512_vnni(const Q8_0x16Block* panel, std::size_t k, const void* x, float* y,
                                   std::size_t rows) {
  gemv_over_groups<Q8_0x16Block, BlockQ8A, 32>(gemv_groups<4>, gemv_groups<1>, panel, k, x, y, rows);
}

}  // namespace cpudl::kernels

namespace cpudl::kernels {

void q8_0x16_q8a_dot_gemm__avx512_vnni(const Q8_0x16Block* panel, std::size_t k, const void* x,
                                       std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                       int rows) {
  dot_gemm<128>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

void q4_0x16_q8a_gemm__avx512_vnni(const Q4_0x16Block* panel, std::size_t k, const void* x,
                                   std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                   int rows) {
  dot_gemm<8>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

}  // namespace cpudl::kernels
