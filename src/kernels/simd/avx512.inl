// SIMD traits for AVX-512 (F/BW/DQ/VL): 16 f32 lanes, masks in k registers. Include only from a
// file compiled with the avx512 flags; everything here has internal linkage (see dispatch.h).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace cpudl::kernels {
namespace {

struct Avx512 {
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  static constexpr int kWidth = 16;

  static __mmask16 tail_mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load_partial(const float* p, std::size_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store_partial(float* p, F v, std::size_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static constexpr std::size_t kAlignment = 64;
  // Non-temporal store (p aligned to kAlignment): skips the read-for-ownership of the line.
  static void stream(float* p, F v) { _mm512_stream_ps(p, v); }
  static void fence() { _mm_sfence(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F zero() { return _mm512_setzero_ps(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  // 1/x: the 14-bit estimate refined by one Newton step (about 1 ulp), without a division's
  // 10-16 cycles a vector.
  static F reciprocal(F x) {
    const F r = _mm512_rcp14_ps(x);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(1.0f)), r);
  }
  // 1/x to at least 14 bits, for callers that refine it: the hardware estimate alone.
  static F reciprocal_estimate(F x) { return _mm512_rcp14_ps(x); }
  // table[i & 31] in each lane, the 32 floats held in two registers: one VPERMT2PS, which Zen 4
  // runs on its FMA pipes at one a cycle (as an FMA), where AVX2 would need four permutes and
  // three blends (kLookup32 tells VectorMath whether its short-range tables pay).
  static constexpr bool kLookup32 = true;
  static F lookup32(const float* table, I i) {
    return _mm512_permutex2var_ps(_mm512_load_ps(table), i, _mm512_load_ps(table + 16));
  }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static F sign_bit(F a) { return _mm512_and_ps(_mm512_set1_ps(-0.0f), a); }
  static F bit_or(F a, F b) { return _mm512_or_ps(a, b); }
  static F round(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static I to_int(F a) { return _mm512_cvtps_epi32(a); }
  // a * 2^n for an integral n, exact from denormal results to overflow: one VSCALEFPS.
  static F scale_by_pow2(F a, F n) { return _mm512_scalef_ps(a, n); }
  static F to_float(I a) { return _mm512_cvtepi32_ps(a); }
  static I add_int(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub_int(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I set1_int(int x) { return _mm512_set1_epi32(x); }
  static I shift_left(I a, int bits) { return _mm512_slli_epi32(a, static_cast<unsigned>(bits)); }
  static I shift_right_arith(I a, int bits) { return _mm512_srai_epi32(a, static_cast<unsigned>(bits)); }
  static I shift_right_logical(I a, int bits) { return _mm512_srli_epi32(a, static_cast<unsigned>(bits)); }
  static I and_int(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_int(I a, I b) { return _mm512_or_si512(a, b); }
  static F bits_to_float(I a) { return _mm512_castsi512_ps(a); }
  static I float_to_bits(F a) { return _mm512_castps_si512(a); }
  static M greater(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M less(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M equal(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M is_nan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M mask_or(M a, M b) { return static_cast<M>(a | b); }
  static M mask_and(M a, M b) { return static_cast<M>(a & b); }
  static F select(M m, F if_true, F if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
  static bool any(M m) { return m != 0; }
  static bool all(M m) { return m == 0xffff; }
  static int first_set(M m) { return __builtin_ctz(static_cast<unsigned>(m)); }
  static unsigned mask_bits(M m) { return static_cast<unsigned>(m); }  // lane i in bit i
  static float reduce_add(F v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }
  static float reduce_max(F v) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }
  // r[0..15] (16 rows of 16) transposed in place: r[q] = column q. Three stages of lane
  // shuffles: pairs of rows interleaved, 4-float column pieces gathered, then 128-bit blocks
  // exchanged twice.
  static void transpose(F* r) {
    F t[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
      r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
      r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
  }
};

}  // namespace
}  // namespace cpudl::kernels
