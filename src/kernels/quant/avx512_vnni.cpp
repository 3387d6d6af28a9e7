// AVX512-VNNI integer LLM weight products (bodies shared in int8_products.inl): Q8_0, Q4_0 and
// the Q4_0 and Q8_0 prompt panels with one VPDPBUSD per 32 byte pairs instead of VPMADDUBSW + VPMADDWD +
// VPADDD, on 256-bit vectors (AVX512-VL): the blocks are 32 values. The float and K-quant
// products have no VNNI form here; AVX-512 CPUs run their AVX2 variants.
#define CPUDL_ISA avx512_vnni
#define CPUDL_QUANT_VNNI 1
#include "kernels/quant/int8_products.inl"

// Generation over the AMX tile panels (kernel_types.h's Q8_0x16Block, repacked at load): one
// token against sixteen rows per 512-bit VPDPBUSD, where the row-major kernel above spends a
// scalar scale conversion and a 256-bit product per row and block. VPDPBUSD multiplies unsigned
// by signed bytes: the activation bytes go in as x + 128 (XOR 0x80) and each block takes back
// 128 times its weights' sums, which a second VPDPBUSD against ones gives on the way. Four row
// groups at once: four memory streams the prefetchers follow, one activation broadcast for all.
namespace cpudl::kernels {
namespace {

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
  for (int g = 0; g < kGroups; ++g) {
    const std::size_t first = static_cast<std::size_t>(g) * 16;
    if (first >= rows) break;
    const std::size_t n = rows - first < 16 ? rows - first : 16;
    _mm512_mask_storeu_ps(y + first, static_cast<__mmask16>((1u << n) - 1), acc[g]);
  }
}

// Q4_0 (kernel_types.h's Q4_0x16Block): a 32-byte group's two nibble planes side by side are a
// 64-byte panel row of unsigned values, which VPDPBUSD takes as they are against the signed
// activation bytes; the offset of 8 comes back as 8 times the activation block's sum.
template <int kGroups>
void gemv_groups_q4(const Q4_0x16Block* panel, std::size_t blocks, const BlockQ8A* x, float* y,
                    std::size_t rows) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m512 acc[kGroups];
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512i dot[kGroups];
    for (int g = 0; g < kGroups; ++g) dot[g] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      std::int32_t four;
      std::memcpy(&four, x[b].qs + 4 * j, 4);
      const __m512i xs = _mm512_set1_epi32(four);
      for (int g = 0; g < kGroups; ++g) {
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(panel[static_cast<std::size_t>(g) * blocks + b].q[j]));
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, low)),
                                             _mm256_and_si256(_mm256_srli_epi16(v, 4), low), 1);
        dot[g] = _mm512_dpbusd_epi32(dot[g], w, xs);
      }
    }
    const __m512 dx = _mm512_set1_ps(x[b].d);
    const __m512i offset = _mm512_set1_epi32(8 * x[b].sum);
    for (int g = 0; g < kGroups; ++g) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(panel[static_cast<std::size_t>(g) * blocks + b].d)));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[g], offset)), _mm512_mul_ps(dw, dx),
                               acc[g]);
    }
  }
  for (int g = 0; g < kGroups; ++g) {
    const std::size_t first = static_cast<std::size_t>(g) * 16;
    if (first >= rows) break;
    const std::size_t n = rows - first < 16 ? rows - first : 16;
    _mm512_mask_storeu_ps(y + first, static_cast<__mmask16>((1u << n) - 1), acc[g]);
  }
}

}  // namespace

void q4_0x16_q8a_gemv__avx512_vnni(const Q4_0x16Block* panel, std::size_t k, const void* x, float* y,
                                   std::size_t rows) {
  const std::size_t blocks = k / 32, groups = (rows + 15) / 16;
  const auto* xb = static_cast<const BlockQ8A*>(x);
  std::size_t g = 0;
  for (; g + 4 <= groups; g += 4)
    gemv_groups_q4<4>(panel + g * blocks, blocks, xb, y + g * 16, rows - g * 16);
  for (; g < groups; ++g) gemv_groups_q4<1>(panel + g * blocks, blocks, xb, y + g * 16, rows - g * 16);
}

void q8_0x16_q8a_gemv__avx512_vnni(const Q8_0x16Block* panel, std::size_t k, const void* x, float* y,
                                   std::size_t rows) {
  const std::size_t blocks = k / 32, groups = (rows + 15) / 16;
  const auto* xb = static_cast<const BlockQ8A*>(x);
  std::size_t g = 0;
  for (; g + 4 <= groups; g += 4) gemv_groups<4>(panel + g * blocks, blocks, xb, y + g * 16, rows - g * 16);
  for (; g < groups; ++g) gemv_groups<1>(panel + g * blocks, blocks, xb, y + g * 16, rows - g * 16);
}

}  // namespace cpudl::kernels
