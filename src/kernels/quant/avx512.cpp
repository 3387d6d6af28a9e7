// AVX-512 packs of the sixteen-row panels (kernel_types.h's Q8_0x16Block, Q4_0x16Block,
// Q4_Kx16Block, Q6_Kx16Block), run over every weight matrix at load. The scalar references took
// 35-47% of loading a 134M model (perf): each output byte gathered its two values one at a time
// from two rows. Here each panel chunk is one dword per row -- a 16-lane gather from the rows'
// blocks -- and the nibble moves are a few whole-vector ANDs, shifts and ORs; the per-row scale
// bytes are transposed with one in-lane byte shuffle and one dword permute. AVX512F + BW only
// (no VBMI): every AVX-512 CPU with the VNNI products that read these panels runs them.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant/ggml_blocks.h"
#include "kernels/quant/quant.h"

namespace cpudl::kernels {
namespace {

// Dword gathers from the same offset of up to 16 rows; lanes of missing rows read as zero.
class RowGather {
 public:
  RowGather(std::size_t w_row_bytes, int rows)
      : offsets_(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                    _mm512_set1_epi32(static_cast<int>(w_row_bytes)))),
        rows_(static_cast<__mmask16>((1u << rows) - 1)) {}
  __m512i dword(const std::uint8_t* at) const {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows_, offsets_, at, 1);
  }
  __mmask16 rows() const { return rows_; }

 private:
  __m512i offsets_;
  __mmask16 rows_;
};

// Byte j of every row's dword (lane r), j = 0..3: returns the 16 rows' byte 0, then their byte
// 1, 2 and 3 -- four [j][row] byte rows of a panel's scale arrays.
__m512i bytes_by_position(__m512i v) {
  v = _mm512_shuffle_epi8(v, _mm512_set4_epi32(0x0F0B0703, 0x0E0A0602, 0x0D090501, 0x0C080400));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
}

void store_halves(std::uint16_t* out, __m512i dwords) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(dwords));
}

void store(void* out, __m512i v) { _mm512_storeu_si512(out, v); }

// A function, not a namespace-scope constant: that would run AVX-512 at static initialisation.
__m512i low_mask() { return _mm512_set1_epi8(0x0F); }

// Nibble planes of two dwords of stored nibbles: a's values in the low nibble, b's in the high.
__m512i low_nibbles(__m512i a, __m512i b) {
  return _mm512_or_si512(_mm512_and_si512(a, low_mask()),
                         _mm512_slli_epi32(_mm512_and_si512(b, low_mask()), 4));
}
__m512i high_nibbles(__m512i a, __m512i b) {
  return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a, 4), low_mask()),
                         _mm512_andnot_si512(low_mask(), b));
}

const std::uint8_t* block_at(const void* w, std::size_t index, std::size_t block_bytes) {
  return static_cast<const std::uint8_t*>(w) + index * block_bytes;
}

}  // namespace

void pack_q8_0x16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q8_0x16Block* panel) {
  const RowGather rows16(w_row_bytes, rows);
  for (std::size_t b = 0; b < k / 32; ++b) {
    const std::uint8_t* in = block_at(w, b, sizeof(BlockQ8_0));
    _mm512_storeu_ps(panel[b].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(rows16.dword(in))));
    for (int g = 0; g < 8; ++g) store(panel[b].q[g], rows16.dword(in + 2 + 4 * g));
  }
}

// Signed values (nibble - 8), missing rows 0.
void pack_q4_0x16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q8_0x16Block* panel) {
  const RowGather rows16(w_row_bytes, rows);
  const __m512i eight = _mm512_set1_epi8(8);
  for (std::size_t b = 0; b < k / 32; ++b) {
    const std::uint8_t* in = block_at(w, b, sizeof(BlockQ4_0));
    _mm512_storeu_ps(panel[b].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(rows16.dword(in))));
    for (int g = 0; g < 4; ++g) {
      const __m512i q = rows16.dword(in + 2 + 4 * g);
      const __m512i low = _mm512_and_si512(q, low_mask()),
                    high = _mm512_and_si512(_mm512_srli_epi32(q, 4), low_mask());
      store(panel[b].q[g], _mm512_maskz_mov_epi32(rows16.rows(), _mm512_sub_epi8(low, eight)));
      store(panel[b].q[g + 4], _mm512_maskz_mov_epi32(rows16.rows(), _mm512_sub_epi8(high, eight)));
    }
  }
}

void pack_q4_0x16_nibbles__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                                  Q4_0x16Block* panel) {
  const RowGather rows16(w_row_bytes, rows);
  for (std::size_t b = 0; b < k / 32; ++b) {
    const std::uint8_t* in = block_at(w, b, sizeof(BlockQ4_0));
    store_halves(panel[b].d, rows16.dword(in));
    __m512i q[4];
    for (int m = 0; m < 4; ++m) q[m] = rows16.dword(in + 2 + 4 * m);
    // Values 0-15 are the low nibbles of bytes 0-15, values 16-31 their high nibbles.
    store(panel[b].q[0], low_nibbles(q[0], q[1]));
    store(panel[b].q[1], low_nibbles(q[2], q[3]));
    store(panel[b].q[2], high_nibbles(q[0], q[1]));
    store(panel[b].q[3], high_nibbles(q[2], q[3]));
  }
}

void pack_q4_kx16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q4_Kx16Block* panel) {
  const RowGather rows16(w_row_bytes, rows);
  const __m512i six_bits = _mm512_set1_epi8(0x3F), bits_4_5 = _mm512_set1_epi8(0x30);
  for (std::size_t b = 0; b < k / 256; ++b) {
    const std::uint8_t* in = block_at(w, b, sizeof(BlockQ4_K));
    Q4_Kx16Block& out = panel[b];
    const __m512i d = rows16.dword(in);
    store_halves(out.d, d);
    store_halves(out.dmin, _mm512_srli_epi32(d, 16));
    // The 12 scale bytes as three dwords: ggml's packing of eight 6-bit (scale, min) pairs.
    const __m512i s0 = rows16.dword(in + 4), s1 = rows16.dword(in + 8), s2 = rows16.dword(in + 12);
    store(out.scales[0], bytes_by_position(_mm512_and_si512(s0, six_bits)));
    store(out.mins[0], bytes_by_position(_mm512_and_si512(s1, six_bits)));
    store(out.scales[4],
          bytes_by_position(_mm512_or_si512(_mm512_and_si512(s2, low_mask()),
                                            _mm512_and_si512(_mm512_srli_epi32(s0, 2), bits_4_5))));
    store(out.mins[4],
          bytes_by_position(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), low_mask()),
                                            _mm512_and_si512(_mm512_srli_epi32(s1, 2), bits_4_5))));
    // Sub-blocks 2p and 2p + 1 share bytes 32p-32p+31: low nibbles and high.
    for (int p = 0; p < 4; ++p) {
      __m512i q[8];
      for (int m = 0; m < 8; ++m) q[m] = rows16.dword(in + 16 + 32 * p + 4 * m);
      for (int c = 0; c < 4; ++c) {
        store(out.q[2 * p][c], low_nibbles(q[2 * c], q[2 * c + 1]));
        store(out.q[2 * p + 1][c], high_nibbles(q[2 * c], q[2 * c + 1]));
      }
    }
  }
}

void pack_q6_kx16__avx512(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                          Q6_Kx16Block* panel) {
  const RowGather rows16(w_row_bytes, rows);
  const __m512i two_bits = _mm512_set1_epi8(3);
  for (std::size_t b = 0; b < k / 256; ++b) {
    const std::uint8_t* in = block_at(w, b, sizeof(BlockQ6_K));
    Q6_Kx16Block& out = panel[b];
    // d is the block's last two bytes: the dword that ends with it stays inside the row.
    store_halves(out.d, _mm512_srli_epi32(rows16.dword(in + offsetof(BlockQ6_K, d) - 2), 16));
    for (int m = 0; m < 4; ++m)
      store(out.scales[4 * m], bytes_by_position(rows16.dword(in + offsetof(BlockQ6_K, scales) + 4 * m)));
    // Value 128h + 32m + 16l + u (sub-block j = 8h + 2m + l) is ql[64h + 32(m % 2) + 16l + u]'s
    // low nibble (m < 2) or high one, with bits 2m-2m+1 of qh[32h + 16l + u] above.
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 2; ++l) {
        __m512i qh[4], ql[2][4];
        for (int g = 0; g < 4; ++g) {
          qh[g] = rows16.dword(in + offsetof(BlockQ6_K, qh) + 32 * h + 16 * l + 4 * g);
          for (int odd = 0; odd < 2; ++odd)
            ql[odd][g] = rows16.dword(in + 64 * h + 32 * odd + 16 * l + 4 * g);
        }
        for (int m = 0; m < 4; ++m) {
          const int j = 8 * h + 2 * m + l;
          const __m512i* n = ql[m % 2];
          store(out.low[j][0], m < 2 ? low_nibbles(n[0], n[1]) : high_nibbles(n[0], n[1]));
          store(out.low[j][1], m < 2 ? low_nibbles(n[2], n[3]) : high_nibbles(n[2], n[3]));
          __m512i high = _mm512_setzero_si512();
          for (int g = 0; g < 4; ++g)
            high = _mm512_or_si512(
                high, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh[g], 2 * m), two_bits), 2 * g));
          store(out.high[j], high);
        }
      }
  }
}

}  // namespace cpudl::kernels
