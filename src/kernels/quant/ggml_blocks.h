// The tensor types of the GGUF format (ggml's type ids, as stored in the file) and the block
// layouts of the quantised types cpudl computes with. Quantised types store a row of ne0 values as
// ne0 / block_size blocks. Plain aggregates only: kernel files include this header (see
// kernels/dispatch.h); the GGUF reader's table of names and sizes is llm/ggml_types.h.
#pragma once

#include <cstdint>

namespace cpudl {

enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
};

// The block structs of the quantised types cpudl computes with; `d` and `dmin` are IEEE fp16 bits.
constexpr int kQ8Block = 32;
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[32];  // x = d * q
};
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[16];  // x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8)
};
constexpr int kSuperBlock = 256;
struct BlockQ4_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];  // 8 (scale, min) pairs of 6 bits, packed
  std::uint8_t qs[128];     // x = d * scale_j * q - dmin * min_j, q in [0, 15]
};
struct BlockQ6_K {
  std::uint8_t ql[128];    // low 4 bits
  std::uint8_t qh[64];     // high 2 bits
  std::int8_t scales[16];  // per 16 values
  std::uint16_t d;         // x = d * scale * (q - 32), q in [0, 63]
};
// The activation format of the Q8_0 and Q4_0 products (cpudl's own, never in a file): 32 int8
// with the scale as a float (converted once per activation, not once per weight row) and the
// sum of the 32 values, which the Q4_0 product uses to apply the weights' offset of 8.
struct BlockQ8A {
  float d;
  std::int32_t sum;
  std::int8_t qs[32];
};
// The activation format of the K-quant dot products: 256 int8 with a float scale and the sums of
// each 16 (for the min terms of Q4_K).
struct BlockQ8_K {
  float d;
  std::int8_t qs[256];
  std::int16_t bsums[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 && sizeof(BlockQ8A) == 40);

}  // namespace cpudl
