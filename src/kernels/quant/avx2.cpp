// AVX2 + FMA + F16C LLM weight products. Tokens go four at a time: each weight block is loaded
// and unpacked once and multiplied into four activation rows (prompt processing); a single token
// (generation) alternates two accumulators so the FMA latency does not bound the memory stream.
#include <immintrin.h>

#include "kernels/quant/quant.h"
#include "llm/ggml_types.h"

namespace cpudl::kernels {

namespace {

using llm::BlockQ4_0;
using llm::BlockQ8_0;

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float half(std::uint16_t h) { return _cvtsh_ss(h); }

// The 32 int8 products of signed w and x, summed to 8 int32 lanes, as floats. maddubs takes an
// unsigned and a signed operand: |w| and x * sign(w) give the same products without overflow.
__m256 dot32(__m256i abs_w, __m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

template <class X>
const X* row(const void* base, std::size_t bytes, std::size_t i) {
  return reinterpret_cast<const X*>(static_cast<const char*>(base) + i * bytes);
}

// Blocked integer products: Unpack(w_block) -> 32 signed int8 weights.
template <int NT, class W, class Unpack>
void int8_tile(const WeightMatmulArgs& a, std::size_t t0, Unpack unpack) {
  const std::size_t nb = a.k / 32;
  const BlockQ8_0* x[NT];
  for (int i = 0; i < NT; ++i) x[i] = row<BlockQ8_0>(a.x, a.x_row_bytes, t0 + static_cast<std::size_t>(i));
  for (std::size_t r = 0; r < a.rows; ++r) {
    const W* w = row<W>(a.w, a.w_row_bytes, r);
    __m256 acc[NT][2];
    for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (std::size_t b = 0; b < nb; ++b) {
      const __m256i wq = unpack(w[b]);
      const __m256i aw = _mm256_sign_epi8(wq, wq);
      const float dw = half(w[b].d);
      for (int i = 0; i < NT; ++i) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i][b].qs));
        acc[i][b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(dw * half(x[i][b].d)), dot32(aw, wq, xq), acc[i][b & 1]);
      }
    }
    for (int i = 0; i < NT; ++i) a.y[(t0 + static_cast<std::size_t>(i)) * a.ldy + r] = hsum(_mm256_add_ps(acc[i][0], acc[i][1]));
  }
}

template <class W, class Unpack>
void int8_matmul(const WeightMatmulArgs& a, Unpack unpack) {
  std::size_t t = 0;
  for (; t + 4 <= a.tokens; t += 4) int8_tile<4, W>(a, t, unpack);
  for (; t < a.tokens; ++t) int8_tile<1, W>(a, t, unpack);
}

// Float weights: Load(w, i) -> 8 floats at column i.
template <int NT, class W, class Load, class Scalar>
void float_tile(const WeightMatmulArgs& a, std::size_t t0, Load load, Scalar scalar) {
  const float* x[NT];
  for (int i = 0; i < NT; ++i) x[i] = row<float>(a.x, a.x_row_bytes, t0 + static_cast<std::size_t>(i));
  const std::size_t k8 = a.k / 16 * 16;
  for (std::size_t r = 0; r < a.rows; ++r) {
    const W* w = row<W>(a.w, a.w_row_bytes, r);
    __m256 acc[NT][2];
    for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (std::size_t c = 0; c < k8; c += 16) {
      const __m256 w0 = load(w, c), w1 = load(w, c + 8);
      for (int i = 0; i < NT; ++i) {
        acc[i][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[i] + c), acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[i] + c + 8), acc[i][1]);
      }
    }
    for (int i = 0; i < NT; ++i) {
      float s = hsum(_mm256_add_ps(acc[i][0], acc[i][1]));
      for (std::size_t c = k8; c < a.k; ++c) s += scalar(w, c) * x[i][c];
      a.y[(t0 + static_cast<std::size_t>(i)) * a.ldy + r] = s;
    }
  }
}

template <class W, class Load, class Scalar>
void float_matmul(const WeightMatmulArgs& a, Load load, Scalar scalar) {
  std::size_t t = 0;
  for (; t + 4 <= a.tokens; t += 4) float_tile<4, W>(a, t, load, scalar);
  for (; t < a.tokens; ++t) float_tile<1, W>(a, t, load, scalar);
}

__m256 load_bf16(const std::uint16_t* w, std::size_t c) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + c)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

}  // namespace

void f32_f32_matmul__avx2(const WeightMatmulArgs& a) {
  float_matmul<float>(
      a, [](const float* w, std::size_t c) { return _mm256_loadu_ps(w + c); },
      [](const float* w, std::size_t c) { return w[c]; });
}

void f16_f32_matmul__avx2(const WeightMatmulArgs& a) {
  float_matmul<std::uint16_t>(
      a,
      [](const std::uint16_t* w, std::size_t c) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + c)));
      },
      [](const std::uint16_t* w, std::size_t c) { return half(w[c]); });
}

void bf16_f32_matmul__avx2(const WeightMatmulArgs& a) {
  float_matmul<std::uint16_t>(a, load_bf16, [](const std::uint16_t* w, std::size_t c) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(w[c]) << 16)));
  });
}

void q8_0_q8_0_matmul__avx2(const WeightMatmulArgs& a) {
  int8_matmul<BlockQ8_0>(a, [](const BlockQ8_0& b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  });
}

void q4_0_q8_0_matmul__avx2(const WeightMatmulArgs& a) {
  int8_matmul<BlockQ4_0>(a, [](const BlockQ4_0& b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
  });
}

void quantize_row_q8_0__avx2(const float* x, void* blocks, std::size_t k) {
  auto* out = static_cast<BlockQ8_0*>(blocks);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (std::size_t b = 0; b < k / 32; ++b) {
    const float* p = x + b * 32;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(p + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // Pack 32 int32 to 32 int8 in order: packs interleave 128-bit lanes, a permute restores it.
    const __m256i q01 = _mm256_packs_epi32(q[0], q[1]), q23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), bytes);
  }
}

}  // namespace cpudl::kernels
