// The one kernel table: for each kernel, its variants by ISA level, and the choice made once at
// start for this CPU. Nothing else in cpudl picks an ISA.
//
// Why ISA files include only <immintrin.h> and declaration headers: a file compiled with
// -mavx512f that instantiates a shared inline function (any std:: template, any inline helper
// from a common header) emits an AVX-512 copy of it, and the linker may keep that copy for the
// whole program, which then dies of SIGILL on an older CPU. Helpers in ISA files therefore live
// in anonymous namespaces, and a test checks that ISA objects export no weak symbols.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpudl/runtime.h"
#include "kernels/kernel_types.h"

namespace cpudl::kernels {

// X(kernel, function type): every native kernel, once.
#define CPUDL_KERNELS(X)                                               \
  X(f32_add, F32BinaryFn)                                              \
  X(f32_sub, F32BinaryFn)                                              \
  X(f32_mul, F32BinaryFn)                                              \
  X(f32_div, F32BinaryFn)                                              \
  X(f32_relu, F32UnaryFn)                                              \
  X(f32_gelu, F32UnaryFn)                                              \
  X(f32_sigmoid, F32UnaryFn)                                           \
  X(f32_tanh, F32UnaryFn)                                              \
  X(f32_exp, F32UnaryFn)                                               \
  X(f32_log, F32UnaryFn)                                               \
  X(f32_relu_backward, F32UnaryBackwardFn)                             \
  X(f32_gelu_backward, F32UnaryBackwardFn)                             \
  X(f32_sigmoid_backward, F32UnaryBackwardFn)                          \
  X(f32_tanh_backward, F32UnaryBackwardFn)                             \
  X(f32_swiglu, F32BinaryFn)                                           \
  X(f32_add_relu, F32BinaryFn)                                         \
  X(f32_sum, F32ReduceFn)                                              \
  X(f32_max, F32ReduceFn)                                              \
  X(f32_argmax, F32ArgmaxFn)                                           \
  X(f32_indices_above, F32IndicesAboveFn)                              \
  X(box_overlaps_any, BoxOverlapsAnyFn)                                \
  X(f32_softmax, F32RowwiseFn)                                         \
  X(f32_log_softmax, F32RowwiseFn)                                     \
  X(f32_cross_entropy, CrossEntropyFn)                                 \
  X(f32_layer_norm_forward, LayerNormForwardFn)                        \
  X(f32_layer_norm_backward, LayerNormBackwardFn)                      \
  X(f32_rms_norm, RmsNormFn)                                           \
  X(f32_sgd_step, SgdStepFn)                                           \
  X(f32_adam_step, AdamStepFn)                                         \
  X(f32_gemm_tile, GemmTile)                                           \
  X(f32_gemm_rows_6x16, GemmRowsMicrokernelFn)                         \
  X(f32_f32_matmul, WeightMatmulFn)                                    \
  X(f16_f32_matmul, WeightMatmulFn)                                    \
  X(bf16_f32_matmul, WeightMatmulFn)                                   \
  X(q8_0_q8a_matmul, WeightMatmulFn)                                   \
  X(q4_0_q8a_matmul, WeightMatmulFn)                                   \
  X(pack_q4_0x8, PackQ4_0x8Fn)                                         \
  X(q4_0x8_q8a_gemm, Q4_0x8GemmFn)                                     \
  X(pack_q8_0x8, PackQ8_0x8Fn)                                         \
  X(q8_0x8_q8a_gemm, Q8_0x8GemmFn)                                     \
  X(pack_q8_0x16, PackQ8_0x16Fn)                                       \
  X(pack_q4_0x16, PackQ8_0x16Fn)                                       \
  X(q8_0x16_q8a_gemm, Q8_0x16GemmFn)                                   \
  X(q8_0x16_q8a_dot_gemm, Q8_0x16GemmFn)                               \
  X(q8_0x16_q8a_gemv, Q8_0x16GemvFn)                                   \
  X(pack_q4_0x16_nibbles, PackQ4_0x16Fn)                               \
  X(q4_0x16_q8a_gemv, Q4_0x16GemvFn)                                   \
  X(q4_0x16_q8a_gemm, Q4_0x16GemmFn)                                   \
  X(pack_q4_kx16, PackQ4_Kx16Fn)                                       \
  X(q4_kx16_q8_k_gemv, Q4_Kx16GemvFn)                                  \
  X(q4_kx16_q8_k_gemm, Q4_Kx16GemmFn)                                  \
  X(pack_q6_kx16, PackQ6_Kx16Fn)                                       \
  X(q6_kx16_q8_k_gemv, Q6_Kx16GemvFn)                                  \
  X(q6_kx16_q8_k_gemm, Q6_Kx16GemmFn)                                  \
  X(q4_k_q8_k_matmul, WeightMatmulFn)                                  \
  X(q6_k_q8_k_matmul, WeightMatmulFn)                                  \
  X(quantize_row_q8a, QuantizeRowFn)                                   \
  X(quantize_row_q8_k, QuantizeRowFn)                                  \
  X(dequantize_row_f16, DequantizeRowFn)                               \
  X(dequantize_row_bf16, DequantizeRowFn)                              \
  X(dequantize_row_q8_0, DequantizeRowFn)                              \
  X(dequantize_row_q4_0, DequantizeRowFn)                              \
  X(dequantize_row_q4_k, DequantizeRowFn)                              \
  X(dequantize_row_q6_k, DequantizeRowFn)                              \
  X(u8s8_gemm, U8S8GemmFn)                                             \
  X(f32_min_max, F32MinMaxFn)                                          \
  X(f32_quantize_u8, F32QuantizeU8Fn)                                  \
  X(f32_transpose, F32TransposeFn)                                     \
  X(f32_conv_backward_weights_nhwc, ConvBackwardWeightsFn)             \
  X(f32_conv_forward_planes, ConvForwardPlanesFn)                      \
  X(f32_conv_backward_weights_planes, ConvBackwardWeightsPlanesFn)     \
  X(f32_conv_weight_grad_taps, TapGemmFn)                              \
  X(f32_pointwise_tile, PointwiseTileFn)                               \
  X(f32_narrow_linear_forward, NarrowLinearForwardFn)                  \
  X(f32_narrow_linear_backward_data, NarrowLinearBackwardDataFn)       \
  X(f32_narrow_linear_backward_weights, NarrowLinearBackwardWeightsFn) \
  X(f32_winograd_input_4x3, WinogradInputFn)                           \
  X(f32_winograd_input_2x3, WinogradInputFn)                           \
  X(f32_winograd_gemm, WinogradGemmFn)                                 \
  X(f32_winograd_output_4x3, WinogradOutputFn)                         \
  X(f32_winograd_output_2x3, WinogradOutputFn)                         \
  X(f32_winograd_weights_4x3, WinogradWeightsFn)                       \
  X(f32_winograd_weights_2x3, WinogradWeightsFn)                       \
  X(f32_winograd_output_grad_4x3, WinogradOutputGradFn)                \
  X(f32_winograd_gemm_weights, WinogradGemmWeightsFn)                  \
  X(f32_winograd_weight_grad_4x3, WinogradWeightGradFn)                \
  X(f32_max_pool_nhwc, MaxPoolNhwcFn)                                  \
  X(f32_max_pool_nhwc_backward, MaxPoolNhwcBackwardFn)                 \
  X(u8_max_pool_nhwc, U8MaxPoolNhwcFn)                                 \
  X(f32_fma_probe, FmaProbeFn)                                         \
  X(int8_dot_probe, FmaProbeFn)                                        \
  X(bf16_dot_probe, FmaProbeFn)

template <class Fn>
struct KernelVariant {
  IsaLevel level;    // the lowest level that may run it
  const char* name;  // e.g. "f32_add__avx2"
  Fn fn;
};

// Every variant of a kernel, best first; the last is the portable reference.
#define CPUDL_DECLARE_VARIANTS(kernel, Fn) const std::vector<KernelVariant<Fn>>& kernel##_variants();
CPUDL_KERNELS(CPUDL_DECLARE_VARIANTS)
#undef CPUDL_DECLARE_VARIANTS

struct KernelTable {
  IsaLevel level = IsaLevel::generic;
#define CPUDL_TABLE_ENTRY(kernel, Fn) KernelVariant<Fn> kernel{};
  CPUDL_KERNELS(CPUDL_TABLE_ENTRY)
#undef CPUDL_TABLE_ENTRY
};

// The best variant of each kernel that `level` may run.
KernelTable make_kernel_table(IsaLevel level);

// The process's table, for runtime().isa.active; built once (logged when CPUDL_VERBOSE=1).
const KernelTable& kernel_table();

// The output size from which kernels write with non-temporal stores (g_streaming_store_bytes,
// kernel_types.h): what cannot stay in the last-level cache, at least 4 MiB; under a hypervisor,
// whose reported L3 is the host's, 2 MiB a usable core at most.
std::size_t streaming_store_threshold(const CpuFeatures& cpu, const SystemInfo& system);

// (kernel, chosen variant) pairs, for reports.
std::vector<std::pair<const char*, const char*>> describe(const KernelTable& table);

}  // namespace cpudl::kernels
