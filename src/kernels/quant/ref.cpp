// Reference LLM weight products and activation quantisers: plain loops, one token and one row at
// a time, the oracle for the SIMD variants.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/quant/ggml_blocks.h"
#include "kernels/quant/quant.h"

namespace cpudl::kernels {

namespace {

template <class W, class X, class Dot>
void for_each_row_token(const WeightMatmulArgs& a, Dot dot) {
  for (std::size_t t = 0; t < a.tokens; ++t) {
    const auto* x = reinterpret_cast<const X*>(static_cast<const char*>(a.x) + t * a.x_row_bytes);
    for (std::size_t r = 0; r < a.rows; ++r) {
      const auto* w = reinterpret_cast<const W*>(static_cast<const char*>(a.w) + r * a.w_row_bytes);
      a.y[t * a.ldy + r] = dot(w, x);
    }
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K block (8 pairs packed in 12 bytes).
void q4_k_scale_min(int j, const std::uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

void f32_f32_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<float, float>(a, [&](const float* w, const float* x) {
    double s = 0;
    for (std::size_t i = 0; i < a.k; ++i) s += static_cast<double>(w[i]) * x[i];
    return static_cast<float>(s);
  });
}

void f16_f32_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<std::uint16_t, float>(a, [&](const std::uint16_t* w, const float* x) {
    double s = 0;
    for (std::size_t i = 0; i < a.k; ++i) s += static_cast<double>(fp16_to_f32(w[i])) * x[i];
    return static_cast<float>(s);
  });
}

void bf16_f32_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<std::uint16_t, float>(a, [&](const std::uint16_t* w, const float* x) {
    double s = 0;
    for (std::size_t i = 0; i < a.k; ++i) s += static_cast<double>(bf16_to_f32(w[i])) * x[i];
    return static_cast<float>(s);
  });
}

void q8_0_q8a_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<BlockQ8_0, BlockQ8A>(a, [&](const BlockQ8_0* w, const BlockQ8A* x) {
    double s = 0;
    for (std::size_t b = 0; b < a.k / 32; ++b) {
      int sum = 0;
      for (int i = 0; i < 32; ++i) sum += w[b].qs[i] * x[b].qs[i];
      s += static_cast<double>(fp16_to_f32(w[b].d)) * x[b].d * sum;
    }
    return static_cast<float>(s);
  });
}

void q4_0_q8a_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<BlockQ4_0, BlockQ8A>(a, [&](const BlockQ4_0* w, const BlockQ8A* x) {
    double s = 0;
    for (std::size_t b = 0; b < a.k / 32; ++b) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        sum += ((w[b].qs[i] & 0xF) - 8) * x[b].qs[i];
        sum += ((w[b].qs[i] >> 4) - 8) * x[b].qs[i + 16];
      }
      s += static_cast<double>(fp16_to_f32(w[b].d)) * x[b].d * sum;
    }
    return static_cast<float>(s);
  });
}

namespace {

// The prompt panels (kernel_types.h): row r's value c of block b at q[c / 4][r * 4 + c % 4], as
// value(in, c) gives it for a stored block (rows past `rows`: value(nullptr, c)).
template <class Block, class Panel, class Value>
void pack_x8_ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Panel* panel, Value value) {
  constexpr int kRows = sizeof(Panel::d) / sizeof(float);  // 8, or 16 for the AMX panel
  using Byte = std::remove_reference_t<decltype(panel->q[0][0])>;
  for (std::size_t b = 0; b < k / 32; ++b) {
    Panel& out = panel[b];
    for (int r = 0; r < kRows; ++r) {
      const Block* in = r < rows ? reinterpret_cast<const Block*>(static_cast<const char*>(w) +
                                                                  static_cast<std::size_t>(r) * w_row_bytes) +
                                       b
                                 : nullptr;
      out.d[r] = in ? fp16_to_f32(in->d) : 0.0f;
      for (int c = 0; c < 32; ++c) out.q[c / 4][r * 4 + c % 4] = static_cast<Byte>(value(in, c));
    }
  }
}

// y = the panel's rows (bytes minus kBias) . the Q8 activation rows, in double.
template <class Panel, int kBias>
void x8_gemm_ref(const Panel* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                 std::size_t tokens, float* y, std::size_t ldy, int rows) {
  for (std::size_t t = 0; t < tokens; ++t) {
    const auto* xt = reinterpret_cast<const BlockQ8A*>(static_cast<const char*>(x) + t * x_row_bytes);
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (std::size_t b = 0; b < k / 32; ++b) {
        int sum = 0;
        for (int c = 0; c < 32; ++c) sum += (panel[b].q[c / 4][r * 4 + c % 4] - kBias) * xt[b].qs[c];
        s += static_cast<double>(panel[b].d[r]) * xt[b].d * sum;
      }
      y[t * ldy + static_cast<std::size_t>(r)] = static_cast<float>(s);
    }
  }
}

}  // namespace

void pack_q4_0x8__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q4_0x8Block* panel) {
  pack_x8_ref<BlockQ4_0>(w, w_row_bytes, rows, k, panel, [](const BlockQ4_0* in, int c) {
    return !in ? 0 : c < 16 ? (in->qs[c] & 0xF) : (in->qs[c - 16] >> 4);
  });
}

void q4_0x8_q8a_gemm__ref(const Q4_0x8Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                          std::size_t tokens, float* y, std::size_t ldy, int rows) {
  x8_gemm_ref<Q4_0x8Block, 8>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

// The AMX panel: signed values, no bias (Q4_0's nibbles minus 8).
void pack_q8_0x16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q8_0x16Block* panel) {
  pack_x8_ref<BlockQ8_0>(w, w_row_bytes, rows, k, panel,
                         [](const BlockQ8_0* in, int c) { return in ? in->qs[c] : 0; });
}

void pack_q4_0x16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q8_0x16Block* panel) {
  pack_x8_ref<BlockQ4_0>(w, w_row_bytes, rows, k, panel, [](const BlockQ4_0* in, int c) {
    return !in ? 0 : (c < 16 ? (in->qs[c] & 0xF) : (in->qs[c - 16] >> 4)) - 8;
  });
}

void q8_0x16_q8a_gemm__ref(const Q8_0x16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                           std::size_t tokens, float* y, std::size_t ldy, int rows) {
  x8_gemm_ref<Q8_0x16Block, 0>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

void q8_0x16_q8a_gemv__ref(const Q8_0x16Block* panel, std::size_t k, const void* x, float* y,
                           std::size_t rows) {
  for (std::size_t g = 0; g * 16 < rows; ++g)
    q8_0x16_q8a_gemm__ref(panel + g * (k / 32), k, x, 0, 1, y + g * 16, 16,
                          static_cast<int>(std::min<std::size_t>(16, rows - g * 16)));
}

void pack_q4_0x16_nibbles__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k,
                               Q4_0x16Block* panel) {
  auto nibble = [&](int r, std::size_t b, int c) -> std::uint8_t {  // value c of row r's block b
    if (r >= rows) return 0;
    const auto* in = reinterpret_cast<const BlockQ4_0*>(static_cast<const char*>(w) +
                                                        static_cast<std::size_t>(r) * w_row_bytes) +
                     b;
    return c < 16 ? (in->qs[c] & 0xF) : (in->qs[c - 16] >> 4);
  };
  for (std::size_t b = 0; b < k / 32; ++b) {
    Q4_0x16Block& out = panel[b];
    for (int r = 0; r < 16; ++r)
      out.d[r] = r < rows ? reinterpret_cast<const BlockQ4_0*>(static_cast<const char*>(w) +
                                                               static_cast<std::size_t>(r) * w_row_bytes)[b]
                                .d
                          : 0;
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 64; ++i)
        out.q[c][i] = static_cast<std::uint8_t>(nibble(i / 4, b, 8 * c + i % 4) |
                                                (nibble(i / 4, b, 8 * c + 4 + i % 4) << 4));
  }
}

void q4_0x16_q8a_gemv__ref(const Q4_0x16Block* panel, std::size_t k, const void* x, float* y,
                           std::size_t rows) {
  const auto* xb = static_cast<const BlockQ8A*>(x);
  const std::size_t blocks = k / 32;
  for (std::size_t r = 0; r < rows; ++r) {
    const Q4_0x16Block* p = panel + r / 16 * blocks;
    const int row = static_cast<int>(r % 16);
    double s = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      int sum = 0;
      for (int c = 0; c < 32; ++c) {
        const std::uint8_t byte = p[b].q[c / 8][row * 4 + c % 4];
        sum += ((c % 8 < 4 ? byte & 0xF : byte >> 4) - 8) * xb[b].qs[c];
      }
      s += static_cast<double>(fp16_to_f32(p[b].d[row])) * xb[b].d * sum;
    }
    y[r] = static_cast<float>(s);
  }
}

void q4_0x16_q8a_gemm__ref(const Q4_0x16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                           std::size_t tokens, float* y, std::size_t ldy, int rows) {
  float out[16];
  for (std::size_t t = 0; t < tokens; ++t) {
    q4_0x16_q8a_gemv__ref(panel, k, static_cast<const char*>(x) + t * x_row_bytes, out,
                          static_cast<std::size_t>(rows));
    std::copy(out, out + rows, y + t * ldy);
  }
}

void pack_q4_kx16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q4_Kx16Block* panel) {
  for (std::size_t b = 0; b < k / 256; ++b) {
    Q4_Kx16Block& out = panel[b];
    out = {};
    for (int r = 0; r < rows; ++r) {
      const BlockQ4_K& in = reinterpret_cast<const BlockQ4_K*>(static_cast<const char*>(w) +
                                                               static_cast<std::size_t>(r) * w_row_bytes)[b];
      out.d[r] = in.d;
      out.dmin[r] = in.dmin;
      for (int j = 0; j < 8; ++j) {
        int scale, min;
        q4_k_scale_min(j, in.scales, scale, min);
        out.scales[j][r] = static_cast<std::uint8_t>(scale);
        out.mins[j][r] = static_cast<std::uint8_t>(min);
        // Value v of sub-block j: qs[(j / 2) * 32 + v], low nibble for even j, high for odd.
        auto value = [&](int v) {
          const std::uint8_t q = in.qs[(j / 2) * 32 + v];
          return j % 2 == 0 ? q & 0xF : q >> 4;
        };
        for (int c = 0; c < 4; ++c)
          for (int i = 0; i < 4; ++i)
            out.q[j][c][r * 4 + i] =
                static_cast<std::uint8_t>(value(8 * c + i) | (value(8 * c + 4 + i) << 4));
      }
    }
  }
}

void q4_kx16_q8_k_gemv__ref(const Q4_Kx16Block* panel, std::size_t k, const void* x, float* y,
                            std::size_t rows) {
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  const std::size_t blocks = k / 256;
  for (std::size_t r = 0; r < rows; ++r) {
    const Q4_Kx16Block* p = panel + r / 16 * blocks;
    const auto row = static_cast<int>(r % 16);
    double s = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      long scaled = 0, mins = 0;
      for (int j = 0; j < 8; ++j) {
        int dot = 0, sum = 0;
        for (int v = 0; v < 32; ++v) {
          const std::uint8_t byte = p[b].q[j][v / 8][row * 4 + v % 4];
          dot += (v % 8 < 4 ? byte & 0xF : byte >> 4) * xb[b].qs[32 * j + v];
          sum += xb[b].qs[32 * j + v];
        }
        scaled += static_cast<long>(p[b].scales[j][row]) * dot;
        mins += static_cast<long>(p[b].mins[j][row]) * sum;
      }
      s += static_cast<double>(xb[b].d) * (fp16_to_f32(p[b].d[row]) * static_cast<double>(scaled) -
                                           fp16_to_f32(p[b].dmin[row]) * static_cast<double>(mins));
    }
    y[r] = static_cast<float>(s);
  }
}

void q4_kx16_q8_k_gemm__ref(const Q4_Kx16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                            std::size_t tokens, float* y, std::size_t ldy, int rows) {
  for (std::size_t t = 0; t < tokens; ++t)
    q4_kx16_q8_k_gemv__ref(panel, k, static_cast<const char*>(x) + t * x_row_bytes, y + t * ldy,
                           static_cast<std::size_t>(rows));
}

namespace {
// Value v (0..255) of a Q6_K block, unsigned as stored (0..63): dequantize_row_q6_k__ref's
// layout (each 128-value half: l + 32m takes ql[l + 32 (m % 2)]'s low nibble for m < 2, its high
// one else, and bits 2m..2m+1 of qh[l]).
int q6_k_value(const BlockQ6_K& blk, int v) {
  const int half = v / 128, m = v % 128 / 32, l = v % 32;
  const std::uint8_t ql = blk.ql[64 * half + l + 32 * (m % 2)];
  const int low = m < 2 ? ql & 0xF : ql >> 4;
  return low | (((blk.qh[32 * half + l] >> (2 * m)) & 3) << 4);
}
}  // namespace

void pack_q6_kx16__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q6_Kx16Block* panel) {
  for (std::size_t b = 0; b < k / 256; ++b) {
    Q6_Kx16Block& out = panel[b];
    out = {};
    for (int r = 0; r < rows; ++r) {
      const BlockQ6_K& in = reinterpret_cast<const BlockQ6_K*>(static_cast<const char*>(w) +
                                                               static_cast<std::size_t>(r) * w_row_bytes)[b];
      out.d[r] = in.d;
      for (int j = 0; j < 16; ++j) {
        out.scales[j][r] = in.scales[j];
        for (int i = 0; i < 4; ++i) {
          for (int c = 0; c < 2; ++c)
            out.low[j][c][r * 4 + i] =
                static_cast<std::uint8_t>((q6_k_value(in, 16 * j + 8 * c + i) & 0xF) |
                                          (q6_k_value(in, 16 * j + 8 * c + 4 + i) & 0xF) << 4);
          int high = 0;
          for (int g = 0; g < 4; ++g) high |= (q6_k_value(in, 16 * j + 4 * g + i) >> 4) << (2 * g);
          out.high[j][r * 4 + i] = static_cast<std::uint8_t>(high);
        }
      }
    }
  }
}

void q6_kx16_q8_k_gemv__ref(const Q6_Kx16Block* panel, std::size_t k, const void* x, float* y,
                            std::size_t rows) {
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  const std::size_t blocks = k / 256;
  for (std::size_t r = 0; r < rows; ++r) {
    const Q6_Kx16Block* p = panel + r / 16 * blocks;
    const auto row = static_cast<int>(r % 16);
    double s = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      long scaled = 0;
      for (int j = 0; j < 16; ++j) {
        int dot = 0;
        for (int v = 0; v < 16; ++v) {
          const std::uint8_t low = p[b].low[j][v / 8][row * 4 + v % 4];
          const int q = (v % 8 < 4 ? low & 0xF : low >> 4) |
                        ((p[b].high[j][row * 4 + v % 4] >> (2 * (v / 4))) & 3) << 4;
          dot += (q - 32) * xb[b].qs[16 * j + v];
        }
        scaled += static_cast<long>(p[b].scales[j][row]) * dot;
      }
      s += static_cast<double>(xb[b].d) * fp16_to_f32(p[b].d[row]) * static_cast<double>(scaled);
    }
    y[r] = static_cast<float>(s);
  }
}

void q6_kx16_q8_k_gemm__ref(const Q6_Kx16Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                            std::size_t tokens, float* y, std::size_t ldy, int rows) {
  for (std::size_t t = 0; t < tokens; ++t)
    q6_kx16_q8_k_gemv__ref(panel, k, static_cast<const char*>(x) + t * x_row_bytes, y + t * ldy,
                           static_cast<std::size_t>(rows));
}

// Q8_0: the signed bytes biased by 128.
void pack_q8_0x8__ref(const void* w, std::size_t w_row_bytes, int rows, std::size_t k, Q8_0x8Block* panel) {
  pack_x8_ref<BlockQ8_0>(w, w_row_bytes, rows, k, panel,
                         [](const BlockQ8_0* in, int c) { return (in ? in->qs[c] : 0) + 128; });
}

void q8_0x8_q8a_gemm__ref(const Q8_0x8Block* panel, std::size_t k, const void* x, std::size_t x_row_bytes,
                          std::size_t tokens, float* y, std::size_t ldy, int rows) {
  x8_gemm_ref<Q8_0x8Block, 128>(panel, k, x, x_row_bytes, tokens, y, ldy, rows);
}

void q4_k_q8_k_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<BlockQ4_K, BlockQ8_K>(a, [&](const BlockQ4_K* w, const BlockQ8_K* x) {
    double s = 0;
    for (std::size_t b = 0; b < a.k / 256; ++b) {
      const BlockQ4_K& wb = w[b];
      const BlockQ8_K& xb = x[b];
      long sum_scaled = 0, sum_min = 0;
      for (int j = 0; j < 8; ++j) {
        int scale, min;
        q4_k_scale_min(j, wb.scales, scale, min);
        // Sub-blocks 2c and 2c+1 share 32 bytes of qs: low nibbles, then high nibbles.
        const std::uint8_t* q = wb.qs + (j / 2) * 32;
        int dot = 0;
        for (int i = 0; i < 32; ++i) dot += ((j % 2 == 0) ? (q[i] & 0xF) : (q[i] >> 4)) * xb.qs[j * 32 + i];
        sum_scaled += static_cast<long>(scale) * dot;
        sum_min += static_cast<long>(min) * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
      }
      s += static_cast<double>(xb.d) * (fp16_to_f32(wb.d) * static_cast<double>(sum_scaled) -
                                        fp16_to_f32(wb.dmin) * static_cast<double>(sum_min));
    }
    return static_cast<float>(s);
  });
}

void q6_k_q8_k_matmul__ref(const WeightMatmulArgs& a) {
  for_each_row_token<BlockQ6_K, BlockQ8_K>(a, [&](const BlockQ6_K* w, const BlockQ8_K* x) {
    double s = 0;
    for (std::size_t b = 0; b < a.k / 256; ++b) {
      const BlockQ6_K& wb = w[b];
      const BlockQ8_K& xb = x[b];
      long sum = 0;
      // Two halves of 128 values; within each, value l + 32m takes 4 bits from ql and 2 from qh.
      for (int half = 0; half < 2; ++half) {
        const std::uint8_t* ql = wb.ql + 64 * half;
        const std::uint8_t* qh = wb.qh + 32 * half;
        const std::int8_t* sc = wb.scales + 8 * half;
        const std::int8_t* xq = xb.qs + 128 * half;
        for (int l = 0; l < 32; ++l) {
          const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          const int g = l / 16;
          sum += static_cast<long>(sc[g]) * q1 * xq[l] + static_cast<long>(sc[g + 2]) * q2 * xq[l + 32] +
                 static_cast<long>(sc[g + 4]) * q3 * xq[l + 64] +
                 static_cast<long>(sc[g + 6]) * q4 * xq[l + 96];
        }
      }
      s += static_cast<double>(xb.d) * fp16_to_f32(wb.d) * static_cast<double>(sum);
    }
    return static_cast<float>(s);
  });
}

// Symmetric: d = max|x| / 127, q = x / d rounded to nearest even, as the SIMD variants round
// (the fixtures' weights were rounded half away from zero, as ggml does); sum = sum(q).
void quantize_row_q8a__ref(const float* x, void* blocks, std::size_t k) {
  auto* out = static_cast<BlockQ8A*>(blocks);
  for (std::size_t b = 0; b < k / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].qs[i] = static_cast<std::int8_t>(std::nearbyint(x[b * 32 + i] * inv));
      sum += out[b].qs[i];
    }
    out[b].sum = sum;
  }
}

// Q8_K keeps a float scale (it is only ever an activation) and the sums of each 16 values.
void quantize_row_q8_k__ref(const float* x, void* blocks, std::size_t k) {
  auto* out = static_cast<BlockQ8_K*>(blocks);
  for (std::size_t b = 0; b < k / 256; ++b) {
    float amax = 0;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[b * 256 + i]));
    const float d = amax / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int i = 0; i < 256; ++i)
      out[b].qs[i] = static_cast<std::int8_t>(std::nearbyint(x[b * 256 + i] * inv));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += out[b].qs[g * 16 + i];
      out[b].bsums[g] = static_cast<std::int16_t>(s);
    }
  }
}

void dequantize_row_f16__ref(const void* in, float* out, std::size_t k) {
  for (std::size_t i = 0; i < k; ++i) out[i] = fp16_to_f32(static_cast<const std::uint16_t*>(in)[i]);
}

void dequantize_row_bf16__ref(const void* in, float* out, std::size_t k) {
  for (std::size_t i = 0; i < k; ++i) out[i] = bf16_to_f32(static_cast<const std::uint16_t*>(in)[i]);
}

void dequantize_row_q8_0__ref(const void* in, float* out, std::size_t k) {
  for (std::size_t b = 0; b < k / 32; ++b) {
    const auto& blk = static_cast<const BlockQ8_0*>(in)[b];
    const float d = fp16_to_f32(blk.d);
    for (int i = 0; i < 32; ++i) out[32 * b + i] = d * static_cast<float>(blk.qs[i]);
  }
}

void dequantize_row_q4_0__ref(const void* in, float* out, std::size_t k) {
  for (std::size_t b = 0; b < k / 32; ++b) {
    const auto& blk = static_cast<const BlockQ4_0*>(in)[b];
    const float d = fp16_to_f32(blk.d);
    for (int i = 0; i < 16; ++i) {
      out[32 * b + i] = d * static_cast<float>((blk.qs[i] & 0xF) - 8);
      out[32 * b + i + 16] = d * static_cast<float>((blk.qs[i] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_k__ref(const void* in, float* out, std::size_t k) {
  for (std::size_t b = 0; b < k / 256; ++b) {
    const auto& blk = static_cast<const BlockQ4_K*>(in)[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      q4_k_scale_min(j, blk.scales, sc, m);
      for (int i = 0; i < 32; ++i) {
        const std::uint8_t q = blk.qs[(j / 2) * 32 + i];
        out[256 * b + 32 * j + i] =
            d * static_cast<float>(sc) * static_cast<float>(j % 2 == 0 ? q & 0xF : q >> 4) -
            dmin * static_cast<float>(m);
      }
    }
  }
}

void dequantize_row_q6_k__ref(const void* in, float* out, std::size_t k) {
  for (std::size_t b = 0; b < k / 256; ++b) {
    const auto& blk = static_cast<const BlockQ6_K*>(in)[b];
    const float d = fp16_to_f32(blk.d);
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* ql = blk.ql + 64 * half;
      const std::uint8_t* qh = blk.qh + 32 * half;
      float* y = out + 256 * b + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int q[4] = {((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32,
                          ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32,
                          ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                          ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32};
        for (int m = 0; m < 4; ++m)
          y[l + 32 * m] =
              d * static_cast<float>(blk.scales[8 * half + (l + 32 * m) / 16]) * static_cast<float>(q[m]);
      }
    }
  }
}

}  // namespace cpudl::kernels
