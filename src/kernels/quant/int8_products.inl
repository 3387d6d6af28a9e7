// The integer LLM weight products -- Q8_0 and Q4_0 weights against Q8 activation blocks, and
// the prompt panels (Q4_0; Q8_0 on VNNI only) -- for the ISA file that includes this: avx2.cpp
// (CPUDL_QUANT_VNNI 0: VPMADDUBSW + VPMADDWD) and avx512_vnni.cpp (1: one VPDPBUSD per 32 byte pairs, on the
// same 256-bit vectors, as the blocks hold 32 values). The includer defines CPUDL_ISA, the kernels' name
// suffix. Tokens go four at a time: each weight block is loaded and unpacked once and multiplied into four
// activation rows; a single token (generation) reads four rows a quarter of the slice apart at once, four
// memory streams the prefetchers follow side by side.
#include "kernels/quant/common.inl"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {
namespace {

// acc + the u8 x s8 products of u and s, four adjacent pairs summed into each int32 lane. The
// operands here never saturate VPMADDUBSW's int16 pair sums (unsigned values at most 128 times
// signed ones at most 127, or 15 x 127), so both forms give the same integers.
__m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if CPUDL_QUANT_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// 32 int8 products summed to 8 int32 lanes, as floats. The products multiply an unsigned operand
// by a signed one: Q4_0 nibbles (0..15) are unsigned as stored, their offset of 8 applied once
// per block through the activation's sum; signed Q8_0 weights go through |w| and x * sign(w).
__m256 dot_signed(__m256i w, __m256i x) {
  return _mm256_cvtepi32_ps(dot_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)));
}

struct Q8_0Weights {
  using Block = BlockQ8_0;
  static constexpr bool kUnsigned = false;
  static __m256i load(const Block& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};
struct Q4_0Weights {
  using Block = BlockQ4_0;
  static constexpr bool kUnsigned = true;
  // The 16 bytes in both halves; the low half keeps the low nibbles (values 0-15), the high half
  // the high nibbles (16-31): the order of the activation's 32 values.
  static __m256i load(const Block& b) {
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
    return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
  }
};

// NT tokens per pass over a weight row: each weight block is loaded and unpacked once for NT
// tokens; two accumulators per token (even and odd blocks) keep the FMA latency off the
// critical path. (Adjacent rows interleaved to share the activation loads halved the Q8_0
// generation speed here; a single token goes through int8_streams instead, four rows a quarter
// of the slice apart, which the prefetchers follow as four streams.)
// One weight block (unpacked to q) . one activation block, as 8 float lanes to scale and sum.
template <class Weights>
__m256 block_product(__m256i q, const BlockQ8A& x) {
  const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  if constexpr (Weights::kUnsigned) {
    // sum (q - 8) x = sum q x - 8 sum x: each of the 8 int32 lanes gives up one sum x.
    return _mm256_cvtepi32_ps(dot_u8s8(_mm256_set1_epi32(-x.sum), q, xq));
  } else {
    return dot_signed(q, xq);
  }
}

template <int NT, class Weights>
void int8_tile(const WeightMatmulArgs& a, std::size_t t0) {
  using W = typename Weights::Block;
  const std::size_t nb = a.k / 32;
  const BlockQ8A* x[NT];
  for (int i = 0; i < NT; ++i) x[i] = row<BlockQ8A>(a.x, a.x_row_bytes, t0 + static_cast<std::size_t>(i));
  // acc += (dw dx) * (w . x) for block b of every token; indexed by constants only, so the
  // accumulators stay in registers (an index like b & 1 sends them through the stack).
  auto step = [&](const W& wb, std::size_t b, __m256* acc) {
    const __m256i q = Weights::load(wb);
    const float d = half(wb.d);
    for (int i = 0; i < NT; ++i)
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[i][b].d), block_product<Weights>(q, x[i][b]), acc[i]);
  };
  for (std::size_t r = 0; r < a.rows; ++r) {
    const W* w = row<W>(a.w, a.w_row_bytes, r);
    __m256 even[NT], odd[NT];
    for (int i = 0; i < NT; ++i) even[i] = odd[i] = _mm256_setzero_ps();
    std::size_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      // Software prefetch a few cache lines ahead (into the next row at the end of this one).
      _mm_prefetch(reinterpret_cast<const char*>(w + b) + kPrefetchBytes, _MM_HINT_T0);
      step(w[b], b, even);
      step(w[b + 1], b + 1, odd);
    }
    if (b < nb) step(w[b], b, even);
    for (int i = 0; i < NT; ++i)
      a.y[(t0 + static_cast<std::size_t>(i)) * a.ldy + r] = hsum(_mm256_add_ps(even[i], odd[i]));
  }
}

// One token: four concurrent row streams (see float_streams), one accumulator each. Measured
// with `cpudl bench llm` on the 134M model, one thread, back to back: Q8_0 generation 86-100 ->
// 124-137 tokens/s, Q4_0 131-141 -> 157-185.
template <class Weights>
void int8_streams(const WeightMatmulArgs& a) {
  using W = typename Weights::Block;
  constexpr int kStreams = 4;
  const std::size_t nb = a.k / 32, quarter = a.rows / kStreams;
  const BlockQ8A* x = row<BlockQ8A>(a.x, a.x_row_bytes, 0);
  for (std::size_t r = 0; r < quarter; ++r) {
    const W* w[kStreams];
    __m256 acc[kStreams];
    for (int s = 0; s < kStreams; ++s) {
      w[s] = row<W>(a.w, a.w_row_bytes, r + static_cast<std::size_t>(s) * quarter);
      acc[s] = _mm256_setzero_ps();
    }
    for (std::size_t b = 0; b < nb; ++b)
      for (int s = 0; s < kStreams; ++s)
        acc[s] = _mm256_fmadd_ps(_mm256_set1_ps(half(w[s][b].d) * x[b].d),
                                 block_product<Weights>(Weights::load(w[s][b]), x[b]), acc[s]);
    for (int s = 0; s < kStreams; ++s) a.y[r + static_cast<std::size_t>(s) * quarter] = hsum(acc[s]);
  }
  if (a.rows > kStreams * quarter) int8_tile<1, Weights>(rows_from(a, kStreams * quarter), 0);
}

template <class Weights>
void int8_matmul(const WeightMatmulArgs& a) {
  if (a.tokens == 1) {
    int8_streams<Weights>(a);
    return;
  }
  std::size_t t = 0;
  for (; t + 4 <= a.tokens; t += 4) int8_tile<4, Weights>(a, t);
  for (; t + 2 <= a.tokens; t += 2) int8_tile<2, Weights>(a, t);
  for (; t < a.tokens; ++t) int8_tile<1, Weights>(a, t);
}

// NT tokens x 8 rows: per block, eight products of a column group's 32 bytes (8 rows x 4
// columns) with 4 broadcast activation bytes. AVX2 sums the maddubs pairs in int16 -- values
// 0-15 times at most 127, in pairs, over 8 groups: at most 30,480, no overflow -- and widens them
// once per block; VNNI accumulates in int32 directly.
// The panel's bytes are the weights plus kBias (Q4_0: the nibbles' offset of 8; Q8_0: the 128
// that made them unsigned), taken out per block as kBias times the activation block's sum. The
// AVX2 int16 sums hold only for Q4_0's nibbles.
template <int NT, class Panel, int kBias>
void x8_tile(const Panel* panel, std::size_t nb, const BlockQ8A* const* x, float* const* y, int rows) {
  __m256 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  for (std::size_t b = 0; b < nb; ++b) {
    const Panel& p = panel[b];
    // sum (q - kBias) x = sum q x - kBias sum x
    __m256i s32[NT];
#if CPUDL_QUANT_VNNI
    for (int i = 0; i < NT; ++i) s32[i] = _mm256_set1_epi32(-kBias * x[i][b].sum);
    for (int g = 0; g < 8; ++g) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q[g]));
      for (int i = 0; i < NT; ++i) {
        std::int32_t four;
        std::memcpy(&four, x[i][b].qs + 4 * g, 4);
        s32[i] = _mm256_dpbusd_epi32(s32[i], wq, _mm256_set1_epi32(four));
      }
    }
#else
    static_assert(kBias == 8, "without VNNI, only Q4_0's nibbles keep the int16 sums exact");
    __m256i s16[NT];
    for (int i = 0; i < NT; ++i) s16[i] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q[g]));
      for (int i = 0; i < NT; ++i) {
        std::int32_t four;
        std::memcpy(&four, x[i][b].qs + 4 * g, 4);
        s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(wq, _mm256_set1_epi32(four)));
      }
    }
    for (int i = 0; i < NT; ++i)
      s32[i] = _mm256_sub_epi32(_mm256_madd_epi16(s16[i], _mm256_set1_epi16(1)),
                                _mm256_set1_epi32(8 * x[i][b].sum));
#endif
    const __m256 dw = _mm256_loadu_ps(p.d);
    for (int i = 0; i < NT; ++i)
      acc[i] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[i]), _mm256_mul_ps(dw, _mm256_set1_ps(x[i][b].d)), acc[i]);
  }
  for (int i = 0; i < NT; ++i) {
    if (rows == 8) {
      _mm256_storeu_ps(y[i], acc[i]);
    } else {
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[i]);
      std::memcpy(y[i], out, static_cast<std::size_t>(rows) * sizeof(float));
    }
  }
}

template <class Panel, int kBias>
void x8_gemm(const Panel* panel, std::size_t k, const void* x, std::size_t x_row_bytes, std::size_t tokens,
             float* y, std::size_t ldy, int rows) {
  const BlockQ8A* xs[4];
  float* ys[4];
  std::size_t t = 0;
  auto rows_of = [&](int n) {
    for (int i = 0; i < n; ++i) {
      xs[i] = row<BlockQ8A>(x, x_row_bytes, t + static_cast<std::size_t>(i));
      ys[i] = y + (t + static_cast<std::size_t>(i)) * ldy;
    }
  };
  for (; t + 4 <= tokens; t += 4) rows_of(4), x8_tile<4, Panel, kBias>(panel, k / 32, xs, ys, rows);
  for (; t < tokens; ++t) rows_of(1), x8_tile<1, Panel, kBias>(panel, k / 32, xs, ys, rows);
}

}  // namespace

void CPUDL_KERNEL(q8_0_q8a_matmul)(const WeightMatmulArgs& a) { int8_matmul<Q8_0Weights>(a); }

void CPUDL_KERNEL(q4_0_q8a_matmul)(const WeightMatmulArgs& a) { int8_matmul<Q4_0Weights>(a); }

void CPUDL_KERNEL(q4_0x8_q8a_gemm)(const Q4_0x8Block* panel, std::size_t k, const void* x,
                                   std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                   int rows) {
  x8_gemm<Q4_0x8Block, 8>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

#if CPUDL_QUANT_VNNI
void CPUDL_KERNEL(q8_0x8_q8a_gemm)(const Q8_0x8Block* panel, std::size_t k, const void* x,
                                   std::size_t x_row_bytes, std::size_t tokens, float* y, std::size_t ldy,
                                   int rows) {
  x8_gemm<Q8_0x8Block, 128>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}
#endif

}  // namespace cpudl::kernels
