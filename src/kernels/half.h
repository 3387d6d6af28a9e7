// IEEE half and bfloat16 conversions in portable code (the SIMD kernels use F16C instead). Kernel
// files and every layer above them use these; plain inline functions of the kernels' layer.
#pragma once

#include <cstdint>
#include <cstring>

namespace cpudl {

inline float fp16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF, bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000 | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as F16C's VCVTPS2PH and NumPy do.
inline std::uint16_t f32_to_fp16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const std::uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return static_cast<std::uint16_t>(sign | 0x7C00 | (abs > 0x7F800000 ? 0x200 : 0));
  if (abs >= 0x477FF000) return static_cast<std::uint16_t>(sign | 0x7C00);  // rounds to inf
  if (abs < 0x38800000) {                                                   // subnormal or zero in half
    if (abs < 0x33000000) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = abs >> 23;
    const std::uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
    const std::uint32_t shift = 126 - exponent;  // 14 + (112 - exponent) ... into 10 bits
    std::uint32_t h = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((abs >> 13) - (112u << 10));
  const std::uint32_t rest = abs & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

inline float bf16_to_f32(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<std::uint16_t>((x >> 16) | 0x40);  // quiet nan
  x += 0x7FFF + ((x >> 16) & 1);
  return static_cast<std::uint16_t>(x >> 16);
}

}  // namespace cpudl
