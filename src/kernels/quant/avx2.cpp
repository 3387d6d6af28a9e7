// AVX2 + FMA + F16C LLM weight products: the integer ones from int8_products.inl (shared with
// the AVX512-VNNI file), the float, K-quant and row-conversion kernels here. Float and K-quant
// products follow the integer ones' plan: four tokens per pass over a weight row, and a single
// token's rows read as four memory streams a quarter of the slice apart.
#define CPUDL_ISA avx2
#define CPUDL_QUANT_VNNI 0
#include "kernels/quant/int8_products.inl"

namespace cpudl::kernels {

namespace {

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
      _mm_prefetch(reinterpret_cast<const char*>(w + c) + kPrefetchBytes, _MM_HINT_T0);
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

// Several tokens (a prompt): NR rows x NT tokens per tile, one accumulator per pair, so each
// weight vector loaded (and converted) serves NT tokens and each activation vector NR rows:
// 3 x 4 = 12 accumulators + 3 weights + 1 activation fill the 16 AVX2 registers, 12 FMAs per
// 7 loads, which keeps the two FMA pipes busy.
template <int NR, int NT, class W, class Load, class Scalar>
void float_block(const WeightMatmulArgs& a, std::size_t r0, std::size_t t0, Load load, Scalar scalar) {
  const W* w[NR];
  const float* x[NT];
  for (int j = 0; j < NR; ++j) w[j] = row<W>(a.w, a.w_row_bytes, r0 + static_cast<std::size_t>(j));
  for (int i = 0; i < NT; ++i) x[i] = row<float>(a.x, a.x_row_bytes, t0 + static_cast<std::size_t>(i));
  __m256 acc[NR][NT];
  for (int j = 0; j < NR; ++j)
    for (int i = 0; i < NT; ++i) acc[j][i] = _mm256_setzero_ps();
  const std::size_t k8 = a.k / 8 * 8;
  for (std::size_t c = 0; c < k8; c += 8) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = load(w[j], c);
    for (int i = 0; i < NT; ++i) {
      const __m256 xv = _mm256_loadu_ps(x[i] + c);
      for (int j = 0; j < NR; ++j) acc[j][i] = _mm256_fmadd_ps(wv[j], xv, acc[j][i]);
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int i = 0; i < NT; ++i) {
      float s = hsum(acc[j][i]);
      for (std::size_t c = k8; c < a.k; ++c) s += scalar(w[j], c) * x[i][c];
      a.y[(t0 + static_cast<std::size_t>(i)) * a.ldy + r0 + static_cast<std::size_t>(j)] = s;
    }
}

template <int NT, class W, class Load, class Scalar>
void float_rows(const WeightMatmulArgs& a, std::size_t t0, Load load, Scalar scalar) {
  std::size_t r = 0;
  for (; r + 3 <= a.rows; r += 3) float_block<3, NT, W>(a, r, t0, load, scalar);
  for (; r < a.rows; ++r) float_block<1, NT, W>(a, r, t0, load, scalar);
}

// One token (generation): memory-bound, so the rows are read as four concurrent streams, one per
// quarter of the slice (row r of each quarter in one pass, sharing the activation loads): with
// one stream the kernel read 10.7-13.0 GB/s where four read 17.8-18.3 (a scratch test over 400
// MB of a mapped F32 GGUF, one thread) -- more than a single-stream sum reaches, as the
// prefetchers track each stream separately.
template <class W, class Load, class Scalar>
void float_streams(const WeightMatmulArgs& a, Load load, Scalar scalar) {
  constexpr int kStreams = 4;
  const float* x = row<float>(a.x, a.x_row_bytes, 0);
  const std::size_t quarter = a.rows / kStreams, k16 = a.k / 16 * 16;
  for (std::size_t r = 0; r < quarter; ++r) {
    const W* w[kStreams];
    __m256 acc[kStreams][2];
    for (int s = 0; s < kStreams; ++s) {
      w[s] = row<W>(a.w, a.w_row_bytes, r + static_cast<std::size_t>(s) * quarter);
      acc[s][0] = acc[s][1] = _mm256_setzero_ps();
    }
    for (std::size_t c = 0; c < k16; c += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
      for (int s = 0; s < kStreams; ++s) {
        acc[s][0] = _mm256_fmadd_ps(load(w[s], c), x0, acc[s][0]);
        acc[s][1] = _mm256_fmadd_ps(load(w[s], c + 8), x1, acc[s][1]);
      }
    }
    for (int s = 0; s < kStreams; ++s) {
      float sum = hsum(_mm256_add_ps(acc[s][0], acc[s][1]));
      for (std::size_t c = k16; c < a.k; ++c) sum += scalar(w[s], c) * x[c];
      a.y[r + static_cast<std::size_t>(s) * quarter] = sum;
    }
  }
  // The rows past four whole quarters, one at a time.
  if (a.rows > kStreams * quarter) float_tile<1, W>(rows_from(a, kStreams * quarter), 0, load, scalar);
}

template <class W, class Load, class Scalar>
void float_matmul(const WeightMatmulArgs& a, Load load, Scalar scalar) {
  if (a.tokens == 1) {
    float_streams<W>(a, load, scalar);
    return;
  }
  std::size_t t = 0;
  for (; t + 4 <= a.tokens; t += 4) float_rows<4, W>(a, t, load, scalar);
  if (a.tokens - t == 3) float_rows<3, W>(a, t, load, scalar);
  if (a.tokens - t == 2) float_rows<2, W>(a, t, load, scalar);
  if (a.tokens - t == 1) float_rows<1, W>(a, t, load, scalar);
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

namespace {

// Eight rows' blocks into panel blocks (Q4_0x8Block, Q8_0x8Block): each row's 32 values in column
// order as 8 int32 of 4 columns (Weights::load; Bias XORed in), transposed so that column group g
// of every row is one vector.
template <class Weights, class Panel, int Bias>
void pack_x8(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Panel* panel) {
  // Reading eight rows side by side block by block is eight short streams the hardware
  // prefetchers barely learn (a 768-wide Q8_0 row is 13 cache lines): the next eight rows, one
  // contiguous stretch, are prefetched a share per block instead (a few tokens at once ran at a
  // quarter of the memory bandwidth without it; prefetches past the matrix never fault).
  const std::size_t nb = k / 32, lines = 8 * w_row_bytes / 64, lines_per_block = (lines + nb - 1) / nb;
  const char* next = static_cast<const char*>(w) + 8 * w_row_bytes;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t end = (b + 1) * lines_per_block < lines ? (b + 1) * lines_per_block : lines;
    for (std::size_t i = b * lines_per_block; i < end; ++i) _mm_prefetch(next + i * 64, _MM_HINT_T1);
    __m256i v[8];
    for (int r = 0; r < 8; ++r) {
      if (r >= rows) {
        v[r] = _mm256_set1_epi8(static_cast<char>(Bias));
        panel[b].d[r] = 0.0f;
        continue;
      }
      const auto& in = row<typename Weights::Block>(w, w_row_bytes, static_cast<std::size_t>(r))[b];
      v[r] = _mm256_xor_si256(Weights::load(in), _mm256_set1_epi8(static_cast<char>(Bias)));
      panel[b].d[r] = half(in.d);
    }
    // 8 x 8 transpose of the int32 column groups.
    __m256i t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
      u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
      u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
      u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
      u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    for (int g = 0; g < 4; ++g) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel[b].q[g]),
                          _mm256_permute2x128_si256(u[g], u[4 + g], 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel[b].q[g + 4]),
                          _mm256_permute2x128_si256(u[g], u[4 + g], 0x31));
    }
  }
}

}  // namespace

void pack_q4_0x8__avx2(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q4_0x8Block* panel) {
  pack_x8<Q4_0Weights, Q4_0x8Block, 0>(w, w_row_bytes, rows, k, panel);
}

// Q8_0: the signed bytes biased to unsigned (XOR 0x80 is + 128 on int8); missing rows are
// weights of 0, bytes of 128.
void pack_q8_0x8__avx2(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q8_0x8Block* panel) {
  pack_x8<Q8_0Weights, Q8_0x8Block, 0x80>(w, w_row_bytes, rows, k, panel);
}

namespace {

float abs_max(const __m256* v, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < n; ++i) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// x * inv rounded to the nearest integer (even on ties, as the reference's nearbyint).
__m256i round_scaled(__m256 x, float inv) {
  return _mm256_cvtps_epi32(
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(inv)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 32 int32 (4 vectors) to 32 int8 in order: packs interleave 128-bit lanes, a permute restores it.
__m256i pack_int8(const __m256i* q) {
  const __m256i q01 = _mm256_packs_epi32(q[0], q[1]), q23 = _mm256_packs_epi32(q[2], q[3]);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

int hsum_int(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void quantize_row_q8a__avx2(const float* x, void* blocks, std::size_t k) {
  auto* out = static_cast<BlockQ8A*>(blocks);
  for (std::size_t b = 0; b < k / 32; ++b) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
    const float d = abs_max(v, 4) / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = round_scaled(v[i], inv);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), pack_int8(q));
    out[b].sum = hsum_int(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  }
}

void quantize_row_q8_k__avx2(const float* x, void* blocks, std::size_t k) {
  auto* out = static_cast<BlockQ8_K*>(blocks);
  for (std::size_t b = 0; b < k / 256; ++b) {
    __m256 v[32];
    for (int i = 0; i < 32; ++i) v[i] = _mm256_loadu_ps(x + b * 256 + 8 * i);
    const float d = abs_max(v, 32) / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int g = 0; g < 8; ++g) {  // 32 values at a time: two of the 16-value sums
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = round_scaled(v[4 * g + i], inv);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + 32 * g), pack_int8(q));
      out[b].bsums[2 * g] = static_cast<std::int16_t>(hsum_int(_mm256_add_epi32(q[0], q[1])));
      out[b].bsums[2 * g + 1] = static_cast<std::int16_t>(hsum_int(_mm256_add_epi32(q[2], q[3])));
    }
  }
}

void dequantize_row_f16__avx2(const void* in, float* out, std::size_t k) {
  const auto* h = static_cast<const std::uint16_t*>(in);
  std::size_t i = 0;
  for (; i + 8 <= k; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < k; ++i) out[i] = half(h[i]);
}

void dequantize_row_bf16__avx2(const void* in, float* out, std::size_t k) {
  const auto* h = static_cast<const std::uint16_t*>(in);
  std::size_t i = 0;
  for (; i + 8 <= k; i += 8) _mm256_storeu_ps(out + i, load_bf16(h, i));
  for (; i < k; ++i)
    out[i] = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h[i]) << 16)));
}

void dequantize_row_q8_0__avx2(const void* in, float* out, std::size_t k) {
  const auto* blocks = static_cast<const BlockQ8_0*>(in);
  for (std::size_t b = 0; b < k / 32; ++b) {
    const __m256 d = _mm256_set1_ps(half(blocks[b].d));
    for (int i = 0; i < 32; i += 8) {
      const __m256i q =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + i)));
      _mm256_storeu_ps(out + 32 * b + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
    }
  }
}

void dequantize_row_q4_0__avx2(const void* in, float* out, std::size_t k) {
  const auto* blocks = static_cast<const BlockQ4_0*>(in);
  for (std::size_t b = 0; b < k / 32; ++b) {
    const __m256 d = _mm256_set1_ps(half(blocks[b].d));
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs));
    const __m128i eight = _mm_set1_epi8(8), low = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low), eight);
    auto store8 = [&](float* dst, __m128i q8) {
      _mm256_storeu_ps(dst, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
    };
    store8(out + 32 * b, lo);
    store8(out + 32 * b + 8, _mm_srli_si128(lo, 8));
    store8(out + 32 * b + 16, hi);
    store8(out + 32 * b + 24, _mm_srli_si128(hi, 8));
  }
}

namespace {

// The 8 scales and 8 mins of a Q4_K block (6 bits each, packed in 12 bytes) as 16 bytes,
// scales first, unpacked four bytes at a time (the reference unpacks them one by one).
__m128i q4_k_scales_mins(const std::uint8_t* packed) {
  std::uint32_t u[4];
  std::memcpy(u, packed, 12);
  const std::uint32_t six = 0x3F3F3F3F, four = 0x0F0F0F0F, two = 0x03030303;
  const std::uint32_t mins_hi = ((u[2] >> 4) & four) | (((u[1] >> 6) & two) << 4);  // mins 4-7
  const std::uint32_t mins_lo = u[1] & six;                                         // mins 0-3
  const std::uint32_t scales_hi = (u[2] & four) | (((u[0] >> 6) & two) << 4);       // scales 4-7
  const std::uint32_t scales_lo = u[0] & six;                                       // scales 0-3
  return _mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi), static_cast<int>(mins_lo),
                        static_cast<int>(mins_hi));
}

// One Q4_K block . one Q8_K activation block, added to acc (the scaled products, in lanes) and
// acc_min (the mins' part, subtracted at the end). The 6-bit scales multiply inside madd (exact
// in int32), broadcast by byte shuffles; the mins meet the activation's 16-value sums in one
// more madd.
inline void q4_k_block(const BlockQ4_K& w, const BlockQ8_K& x, __m256& acc, float& acc_min) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m128i scales_mins = q4_k_scales_mins(w.scales);
  const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scales_mins));  // 8 words per lane
  // Word j of `scales` in every position: shuffle bytes (2j, 2j+1).
  auto scale = [&](int j) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>(((2 * j + 1) << 8) | (2 * j))));
  };
  __m256i sum = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * c));
    const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 64 * c));
    const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 64 * c + 32));
    const __m256i p_lo =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, low), x_lo), scale(2 * c));
    const __m256i p_hi = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), x_hi), scale(2 * c + 1));
    sum = _mm256_add_epi32(sum, _mm256_add_epi32(p_lo, p_hi));
  }
  // sum_j min_j (bsums[2j] + bsums[2j+1]): pair sums by hadd, then one madd.
  const __m128i pair_sums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums)),
                                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums + 8)));
  __m128i m = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scales_mins, 8)), pair_sums);
  m = _mm_add_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_add_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  acc = _mm256_fmadd_ps(_mm256_set1_ps(half(w.d) * x.d), _mm256_cvtepi32_ps(sum), acc);
  acc_min += half(w.dmin) * x.d * static_cast<float>(_mm_cvtsi128_si32(m));
}

// Half h (values 128h..128h+127) of a Q6_K block as 4 x 32 unsigned 6-bit values: value l + 32m
// takes 4 bits from ql (low or high nibble) and 2 from qh.
void q6_k_unpack(const BlockQ6_K& block, int h, __m256i q[4]) {
  const __m256i low = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.ql + 64 * h));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.ql + 64 * h + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.qh + 32 * h));
  auto high_bits = [&](int shift) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), two), 4);
  };
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low), high_bits(0));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low), high_bits(2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), high_bits(4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low), high_bits(6));
}

// One Q6_K block . one Q8_K block, added to acc: q = 4 low bits | 2 high bits << 4, in 0..63,
// multiplied unsigned; the offset of 32 meets the activation's 16-value sums. (No mins: the
// unused acc_min keeps the signature of q4_k_block.)
inline void q6_k_block(const BlockQ6_K& w, const BlockQ8_K& x, __m256& acc, float& /*acc_min*/) {
  __m256i sum = _mm256_setzero_si256();
  int offset = 0;
  for (int g = 0; g < 16; ++g) offset += w.scales[g] * x.bsums[g];
  for (int h = 0; h < 2; ++h) {
    __m256i q[4];
    q6_k_unpack(w, h, q);
    for (int m = 0; m < 4; ++m) {
      const std::int8_t* sc = w.scales + 8 * h + 2 * m;  // values 32m..32m+15, then +16..+31
      const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 128 * h + 32 * m));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(q[m], xq), scales));
    }
  }
  acc = _mm256_fmadd_ps(_mm256_set1_ps(half(w.d) * x.d),
                        _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, _mm256_set1_epi32(4 * offset))), acc);
}

// Rows of K-quant weights . tokens of Q8_K activations, block by block. One token: four rows a
// quarter of the slice apart in one loop, four memory streams (see float_streams); several
// tokens: row by row.
template <class W, class Block>
void k_quant_matmul(const WeightMatmulArgs& a, Block block) {
  const std::size_t nb = a.k / 256;
  auto dot = [&](const W* w, const BlockQ8_K* x) {
    __m256 acc = _mm256_setzero_ps();
    float acc_min = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      _mm_prefetch(reinterpret_cast<const char*>(w + b) + kPrefetchBytes, _MM_HINT_T0);
      block(w[b], x[b], acc, acc_min);
    }
    return hsum(acc) - acc_min;
  };
  std::size_t r0 = 0;
  if (a.tokens == 1) {
    constexpr int kStreams = 4;
    const auto* x = row<BlockQ8_K>(a.x, a.x_row_bytes, 0);
    const std::size_t quarter = a.rows / kStreams;
    for (std::size_t r = 0; r < quarter; ++r) {
      const W* w[kStreams];
      __m256 acc[kStreams];
      float acc_min[kStreams];
      for (int s = 0; s < kStreams; ++s) {
        w[s] = row<W>(a.w, a.w_row_bytes, r + static_cast<std::size_t>(s) * quarter);
        acc[s] = _mm256_setzero_ps();
        acc_min[s] = 0;
      }
      for (std::size_t b = 0; b < nb; ++b)
        for (int s = 0; s < kStreams; ++s) block(w[s][b], x[b], acc[s], acc_min[s]);
      for (int s = 0; s < kStreams; ++s)
        a.y[r + static_cast<std::size_t>(s) * quarter] = hsum(acc[s]) - acc_min[s];
    }
    r0 = kStreams * quarter;
  }
  for (std::size_t t = 0; t < a.tokens; ++t) {
    const auto* x = row<BlockQ8_K>(a.x, a.x_row_bytes, t);
    for (std::size_t r = r0; r < a.rows; ++r) a.y[t * a.ldy + r] = dot(row<W>(a.w, a.w_row_bytes, r), x);
  }
}

}  // namespace

void q4_k_q8_k_matmul__avx2(const WeightMatmulArgs& a) { k_quant_matmul<BlockQ4_K>(a, q4_k_block); }

void q6_k_q8_k_matmul__avx2(const WeightMatmulArgs& a) { k_quant_matmul<BlockQ6_K>(a, q6_k_block); }

// K-quant rows to floats, in the reference's order of operations ((d * scale) * q - dmin * min)
// so that the results are bit-identical.
void dequantize_row_q4_k__avx2(const void* in, float* out, std::size_t k) {
  const auto* blocks = static_cast<const BlockQ4_K*>(in);
  for (std::size_t b = 0; b < k / 256; ++b) {
    alignas(16) std::uint8_t scale_min[16];  // scales 0-7, then mins 0-7
    _mm_store_si128(reinterpret_cast<__m128i*>(scale_min), q4_k_scales_mins(blocks[b].scales));
    const std::uint8_t* scale = scale_min;
    const std::uint8_t* min = scale_min + 8;
    const float d = half(blocks[b].d), dmin = half(blocks[b].dmin);
    for (int j = 0; j < 8; ++j) {
      const __m256 step = _mm256_set1_ps(d * static_cast<float>(scale[j]));
      const __m256 offset = _mm256_set1_ps(dmin * static_cast<float>(min[j]));
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs + (j / 2) * 32));
      const __m128i raw_hi =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs + (j / 2) * 32 + 16));
      const int shift = (j % 2) * 4;
      const __m128i lo = _mm_and_si128(_mm_srl_epi16(raw, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(0x0F));
      const __m128i hi = _mm_and_si128(_mm_srl_epi16(raw_hi, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(0x0F));
      float* dst = out + 256 * b + 32 * j;
      auto store8 = [&](float* p, __m128i q8) {
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8));
        _mm256_storeu_ps(p, _mm256_sub_ps(_mm256_mul_ps(step, q), offset));
      };
      store8(dst, lo);
      store8(dst + 8, _mm_srli_si128(lo, 8));
      store8(dst + 16, hi);
      store8(dst + 24, _mm_srli_si128(hi, 8));
    }
  }
}

void dequantize_row_q6_k__avx2(const void* in, float* out, std::size_t k) {
  const auto* blocks = static_cast<const BlockQ6_K*>(in);
  const __m256i offset = _mm256_set1_epi8(32);
  for (std::size_t b = 0; b < k / 256; ++b) {
    const float d = half(blocks[b].d);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_k_unpack(blocks[b], h, q);
      for (int m = 0; m < 4; ++m) {
        alignas(32) std::int8_t v[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(v), _mm256_sub_epi8(q[m], offset));
        for (int g = 0; g < 2; ++g) {  // 16 values per scale
          const __m256 step = _mm256_set1_ps(d * static_cast<float>(blocks[b].scales[8 * h + 2 * m + g]));
          float* dst = out + 256 * b + 128 * h + 32 * m + 16 * g;
          for (int e = 0; e < 16; e += 8) {
            const __m256i q32 =
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + 16 * g + e)));
            _mm256_storeu_ps(dst + e, _mm256_mul_ps(step, _mm256_cvtepi32_ps(q32)));
          }
        }
      }
    }
  }
}

}  // namespace cpudl::kernels
