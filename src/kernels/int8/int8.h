// Kernels of the dynamic int8 path (ONNX DynamicQuantizeLinear + MatMulInteger, as ONNX Runtime's
// quantize_dynamic and `cpudl quantize --mode dynamic` write them): the range of a tensor, its
// quantisation to uint8, and the u8 x s8 product with the dequantising epilogue fused.
//
// The packed layout of B (K x N, int8), shared by every variant: column blocks of 8; within a
// block, K in groups of 4, each group 32 bytes holding column c's four values at bytes [4c, 4c+4).
// K is padded to a multiple of 4 and N to a multiple of 8, with zeros:
//   byte of b[k][n] = (n / 8) * K4 * 8 + (k / 4) * 32 + (n % 8) * 4 + k % 4,  K4 = round_up(K, 4).
//
// AVX2 has no int8 dot-product instruction. VPMADDUBSW multiplies u8 by s8 and adds pairs into a
// saturating int16: with uint8 activations up to 255 and weights down to -127 a pair can reach
// -64770 and silently clip (the accuracy trap of u8 x s8 kernels on CPUs without VNNI: ONNX
// Runtime 1.30 on this AVX2 machine is 9% off the exact answer on such a model, bench-quant). The
// AVX2 kernel is exact on every path:
//  - 7-bit weights (all in [-64, 63], as `cpudl quantize --reduce-range` writes them): a pair is
//    at most 2 * 255 * 64 = 32640, so VPMADDUBSW on the raw activations cannot clip (three
//    instructions per 32 multiply-adds);
//  - 8-bit weights in [-127, 127]: the activations are shifted to a' = a - 128 (int8), |a'|
//    (<= 128, unsigned) multiplies sign(a') * b, so no pair exceeds 2 * 128 * 127 = 32512, and
//    128 * sum_k b comes back in the epilogue (four instructions per 32);
//  - a matrix holding -128 (possible in a foreign file) runs on the reference.
// AVX512-VNNI's VPDPBUSD has no int16 step: avx512_vnni.cpp multiplies the raw activations by
// any weights (-128 included) exactly, one instruction per 64 multiply-adds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_types.h"

namespace cpudl {
enum class IsaLevel : int;  // cpudl/runtime.h
}

namespace cpudl::kernels {

// The A operand, as every variant reads it: each row of uint8 a, as itself, as a' = a - 128
// (int8) and as |a'| (uint8), each zero-padded to K4 = round_up(K, 4) values; ld >= K4, a
// multiple of 4. Made once per product (M x K work, against the product's M x K x N).
void prepare_u8s8_rows(const std::uint8_t* a, std::size_t m, std::size_t k, std::size_t lda,
                       std::uint8_t* raw, std::int8_t* shifted, std::uint8_t* magnitude, std::size_t ld);
inline constexpr std::size_t u8s8_padded_k(std::size_t k) { return (k + 3) / 4 * 4; }

// Bytes of the packed form of a K x N int8 matrix (32-byte aligned buffers: the kernels load
// whole blocks).
std::size_t u8s8_packed_bytes(std::size_t k, std::size_t n);
// What range the weights span, which decides the SIMD path (see above).
enum class U8S8WeightRange { seven_bit, eight_bit, with_minus_128 };
// Whether the u8s8_gemm variant of `level` is exact for weights holding -128: the reference and
// VPDPBUSD are, the AVX2 paths are not (see above).
bool u8s8_gemm_takes_minus_128(IsaLevel level);
// Packs row-major b (K x N, row stride ldb) and writes each column's sum into col_sums[N].
U8S8WeightRange pack_u8s8_weights(const std::int8_t* b, std::size_t ldb, std::size_t k, std::size_t n,
                                  std::int8_t* packed, std::int32_t* col_sums);

// uint8 scale and zero point for values in [lo, hi], ONNX DynamicQuantizeLinear's rule (also
// what static calibration writes): the range widened to include 0, scale = (hi - lo) / 255,
// zero = round(-lo / scale) clamped to [0, 255]. A range of zeros (or not finite) gives scale 0.
struct U8QuantParams {
  float scale = 0;
  std::int32_t zero = 0;
};
U8QuantParams u8_quant_params(float lo, float hi);

#define CPUDL_DECLARE_INT8(isa)                                                 \
  void u8s8_gemm__##isa(const U8S8GemmArgs& args);                              \
  void f32_min_max__##isa(const float* x, std::size_t n, float* lo, float* hi); \
  void f32_quantize_u8__##isa(const float* x, std::size_t n, float scale, std::int32_t zero, std::uint8_t* y);
CPUDL_DECLARE_INT8(ref)
CPUDL_DECLARE_INT8(avx2)
void u8s8_gemm__avx512_vnni(const U8S8GemmArgs& args);
#undef CPUDL_DECLARE_INT8

}  // namespace cpudl::kernels
