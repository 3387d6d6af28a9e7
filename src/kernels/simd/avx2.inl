// SIMD traits for AVX2 + FMA: 8 f32 lanes, masks held in vector registers. Include only from a
// file compiled with the avx2 flags; everything here has internal linkage (see dispatch.h).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace cpudl::kernels {
namespace {

struct Avx2 {
  using F = __m256;
  using I = __m256i;
  using M = __m256;  // all-ones / all-zeros lanes
  static constexpr int kWidth = 8;
  static constexpr bool kLookup32 = false;  // no two-register permute: see Avx512::lookup32

  static I tail_mask(std::size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load_partial(const float* p, std::size_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store_partial(float* p, F v, std::size_t n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static constexpr std::size_t kAlignment = 32;
  // Non-temporal store (p aligned to kAlignment): skips the read-for-ownership of the line.
  static void stream(float* p, F v) { _mm256_stream_ps(p, v); }
  static void fence() { _mm_sfence(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F zero() { return _mm256_setzero_ps(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }    // a*b + c
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a*b
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  // 1/x: AVX2's 12-bit estimate would need two Newton steps; the division is as cheap.
  static F reciprocal(F x) { return _mm256_div_ps(_mm256_set1_ps(1.0f), x); }
  // 1/x to at least 14 bits, for callers that refine it (AVX-512's VRCP14PS): the 12-bit VRCPPS
  // with one Newton step (alone, it left tanh's one correction at 2.9 ulp).
  static F reciprocal_estimate(F x) {
    const F r = _mm256_rcp_ps(x);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(x, r, _mm256_set1_ps(1.0f)), r);
  }
  static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static F sign_bit(F a) { return _mm256_and_ps(_mm256_set1_ps(-0.0f), a); }
  static F bit_or(F a, F b) { return _mm256_or_ps(a, b); }
  static F round(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static I to_int(F a) { return _mm256_cvtps_epi32(a); }  // nearest
  // a * 2^n for an integral n in [-252, 254]: 2^n applied in two halves built in the exponent
  // field, so that denormal results and overflow to inf stay exact.
  static F scale_by_pow2(F a, F n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1), rest = _mm256_sub_epi32(ni, half);
    const __m256i bias = _mm256_set1_epi32(127);
    const F scale_a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    const F scale_b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(a, scale_a), scale_b);
  }
  static F to_float(I a) { return _mm256_cvtepi32_ps(a); }
  static I add_int(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub_int(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I set1_int(int x) { return _mm256_set1_epi32(x); }
  static I shift_left(I a, int bits) { return _mm256_slli_epi32(a, bits); }
  static I shift_right_arith(I a, int bits) { return _mm256_srai_epi32(a, bits); }
  static I shift_right_logical(I a, int bits) { return _mm256_srli_epi32(a, bits); }
  static I and_int(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_int(I a, I b) { return _mm256_or_si256(a, b); }
  static F bits_to_float(I a) { return _mm256_castsi256_ps(a); }
  static I float_to_bits(F a) { return _mm256_castps_si256(a); }
  static M greater(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M less(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M equal(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M is_nan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M mask_or(M a, M b) { return _mm256_or_ps(a, b); }
  static M mask_and(M a, M b) { return _mm256_and_ps(a, b); }
  static F select(M m, F if_true, F if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
  static bool any(M m) { return _mm256_movemask_ps(m) != 0; }
  static bool all(M m) { return _mm256_movemask_ps(m) == 0xff; }
  static int first_set(M m) { return __builtin_ctz(static_cast<unsigned>(_mm256_movemask_ps(m))); }
  static unsigned mask_bits(M m) { return static_cast<unsigned>(_mm256_movemask_ps(m)); }  // lane i in bit i
  static float reduce_add(F v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  static float reduce_max(F v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  // r[0..7] (8 rows of 8) transposed in place: r[q] = column q.
  static void transpose(F* r) {
    F t[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    // Pairs of rows interleaved; now gather 4-element column pieces.
    F u[8];
    u[0] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(1, 0, 1, 0));
    u[1] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(3, 2, 3, 2));
    u[2] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(1, 0, 1, 0));
    u[3] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(3, 2, 3, 2));
    u[4] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(1, 0, 1, 0));
    u[5] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(3, 2, 3, 2));
    u[6] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(1, 0, 1, 0));
    u[7] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(3, 2, 3, 2));
    // Lanes: low halves give columns 0-3, high halves columns 4-7.
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
      r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
  }
};

}  // namespace
}  // namespace cpudl::kernels
