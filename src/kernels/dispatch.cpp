// Fills the kernel table. Adding a kernel: declare its variants in its family header, list them
// here best first, and add it to CPUDL_KERNELS in dispatch.h.
#include "kernels/dispatch.h"

#include <algorithm>
#include <cstdio>

#include "kernels/conv/conv.h"
#include "kernels/eltwise/eltwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/int8/int8.h"
#include "kernels/layout/layout.h"
#include "kernels/narrow/narrow.h"
#include "kernels/norm/norm.h"
#include "kernels/optim/optim.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/pool/pool.h"
#include "kernels/probe/probe.h"
#include "kernels/quant/quant.h"
#include "kernels/reduce/reduce.h"
#include "kernels/softmax/softmax.h"
#include "kernels/winograd/winograd.h"

namespace cpudl::kernels {

#define CPUDL_VARIANT(level, fn) \
  { IsaLevel::level, #fn, fn }

// The common case: an AVX-512 and an AVX2 variant over the portable reference.
#define CPUDL_STANDARD_VARIANTS(kernel, Fn)                                                   \
  const std::vector<KernelVariant<Fn>>& kernel##_variants() {                                 \
    static const std::vector<KernelVariant<Fn>> v = {CPUDL_VARIANT(avx512, kernel##__avx512), \
                                                     CPUDL_VARIANT(avx2, kernel##__avx2),     \
                                                     CPUDL_VARIANT(generic, kernel##__ref)};  \
    return v;                                                                                 \
  }

CPUDL_STANDARD_VARIANTS(f32_add, F32BinaryFn)
CPUDL_STANDARD_VARIANTS(f32_sub, F32BinaryFn)
CPUDL_STANDARD_VARIANTS(f32_mul, F32BinaryFn)
CPUDL_STANDARD_VARIANTS(f32_div, F32BinaryFn)
CPUDL_STANDARD_VARIANTS(f32_relu, F32UnaryFn)
CPUDL_STANDARD_VARIANTS(f32_gelu, F32UnaryFn)
CPUDL_STANDARD_VARIANTS(f32_sigmoid, F32UnaryFn)
CPUDL_STANDARD_VARIANTS(f32_tanh, F32UnaryFn)
CPUDL_STANDARD_VARIANTS(f32_exp, F32UnaryFn)
CPUDL_STANDARD_VARIANTS(f32_log, F32UnaryFn)
CPUDL_STANDARD_VARIANTS(f32_add_relu, F32BinaryFn)
CPUDL_STANDARD_VARIANTS(f32_relu_backward, F32UnaryBackwardFn)
CPUDL_STANDARD_VARIANTS(f32_gelu_backward, F32UnaryBackwardFn)
CPUDL_STANDARD_VARIANTS(f32_sigmoid_backward, F32UnaryBackwardFn)
CPUDL_STANDARD_VARIANTS(f32_tanh_backward, F32UnaryBackwardFn)
CPUDL_STANDARD_VARIANTS(f32_swiglu, F32BinaryFn)
CPUDL_STANDARD_VARIANTS(f32_sum, F32ReduceFn)
CPUDL_STANDARD_VARIANTS(f32_max, F32ReduceFn)
CPUDL_STANDARD_VARIANTS(f32_argmax, F32ArgmaxFn)
CPUDL_STANDARD_VARIANTS(f32_indices_above, F32IndicesAboveFn)
CPUDL_STANDARD_VARIANTS(box_overlaps_any, BoxOverlapsAnyFn)
CPUDL_STANDARD_VARIANTS(f32_softmax, F32RowwiseFn)
CPUDL_STANDARD_VARIANTS(f32_log_softmax, F32RowwiseFn)
CPUDL_STANDARD_VARIANTS(f32_cross_entropy, CrossEntropyFn)
CPUDL_STANDARD_VARIANTS(f32_layer_norm_forward, LayerNormForwardFn)
CPUDL_STANDARD_VARIANTS(f32_pointwise_tile, PointwiseTileFn)
CPUDL_STANDARD_VARIANTS(f32_layer_norm_backward, LayerNormBackwardFn)
CPUDL_STANDARD_VARIANTS(f32_rms_norm, RmsNormFn)
CPUDL_STANDARD_VARIANTS(f32_sgd_step, SgdStepFn)
CPUDL_STANDARD_VARIANTS(f32_adam_step, AdamStepFn)

const std::vector<KernelVariant<FmaProbeFn>>& f32_fma_probe_variants() {
  static const std::vector<KernelVariant<FmaProbeFn>> v = {CPUDL_VARIANT(avx512, f32_fma_probe__avx512),
                                                           CPUDL_VARIANT(avx2, f32_fma_probe__avx2),
                                                           CPUDL_VARIANT(generic, f32_fma_probe__ref)};
  return v;
}
// The native SGEMM's tiles: 14x32 on AVX-512 (28 zmm accumulators), 6x16 on AVX2 (12 ymm). The
// 14x32 tile's KC is the best of 192/256/384 measured on the driver at 512-2048.
const std::vector<KernelVariant<GemmTile>>& f32_gemm_tile_variants() {
  static const std::vector<KernelVariant<GemmTile>> v = {
      {IsaLevel::avx512,
       "f32_gemm_14x32__avx512",
       {f32_gemm_14x32__avx512, kGemmWideMr, kGemmWideNr, 384, f32_gemm_pack_14__avx512,
        f32_gemm_pack_32__avx512}},
      {IsaLevel::avx2,
       "f32_gemm_6x16__avx2",
       {f32_gemm_6x16__avx2, kGemmMr, kGemmNr, 256, f32_gemm_pack_6__avx2, f32_gemm_pack_16__avx2}},
      {IsaLevel::generic,
       "f32_gemm_6x16__ref",
       {f32_gemm_6x16__ref, kGemmMr, kGemmNr, 256, f32_gemm_pack_6__ref, f32_gemm_pack_16__ref}}};
  return v;
}
const std::vector<KernelVariant<GemmRowsMicrokernelFn>>& f32_gemm_rows_6x16_variants() {
  static const std::vector<KernelVariant<GemmRowsMicrokernelFn>> v = {
      CPUDL_VARIANT(avx2, f32_gemm_rows_6x16__avx2), CPUDL_VARIANT(generic, f32_gemm_rows_6x16__ref)};
  return v;
}

// LLM kernels. The integer products also have an AVX512-VNNI variant (VPDPBUSD; quant.h);
// the float, K-quant and row-conversion kernels run their AVX2 variants on AVX-512 CPUs.
#define CPUDL_VNNI_VARIANTS(kernel, Fn)                                                                 \
  const std::vector<KernelVariant<Fn>>& kernel##_variants() {                                           \
    static const std::vector<KernelVariant<Fn>> v = {CPUDL_VARIANT(avx512_vnni, kernel##__avx512_vnni), \
                                                     CPUDL_VARIANT(avx2, kernel##__avx2),               \
                                                     CPUDL_VARIANT(generic, kernel##__ref)};            \
    return v;                                                                                           \
  }
CPUDL_VNNI_VARIANTS(q8_0_q8a_matmul, WeightMatmulFn)
CPUDL_VNNI_VARIANTS(q4_0_q8a_matmul, WeightMatmulFn)
CPUDL_VNNI_VARIANTS(q4_0x8_q8a_gemm, Q4_0x8GemmFn)
// No AVX2 variant (kernel_types.h's Q8_0x8Block): below VNNI, the reference is chosen and the
// prompt path (llm/model/weight_matmul.cpp) takes Q8_0 through f32 instead.
const std::vector<KernelVariant<Q8_0x8GemmFn>>& q8_0x8_q8a_gemm_variants() {
  static const std::vector<KernelVariant<Q8_0x8GemmFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q8_0x8_q8a_gemm__avx512_vnni), CPUDL_VARIANT(generic, q8_0x8_q8a_gemm__ref)};
  return v;
}

// The AMX tile product (quant/amx.cpp) and its oracle; the packs run once per matrix at load and
// are portable.
const std::vector<KernelVariant<Q8_0x16GemmFn>>& q8_0x16_q8a_gemm_variants() {
  static const std::vector<KernelVariant<Q8_0x16GemmFn>> v = {CPUDL_VARIANT(amx, q8_0x16_q8a_gemm__amx),
                                                              CPUDL_VARIANT(generic, q8_0x16_q8a_gemm__ref)};
  return v;
}
// Several tokens over the same panels on VPDPBUSD (quant/avx512_vnni.cpp): CPUs without AMX, and
// fewer tokens than a tile.
const std::vector<KernelVariant<Q8_0x16GemmFn>>& q8_0x16_q8a_dot_gemm_variants() {
  static const std::vector<KernelVariant<Q8_0x16GemmFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q8_0x16_q8a_dot_gemm__avx512_vnni),
      CPUDL_VARIANT(generic, q8_0x16_q8a_gemm__ref)};
  return v;
}
const std::vector<KernelVariant<Q4_0x16GemmFn>>& q4_0x16_q8a_gemm_variants() {
  static const std::vector<KernelVariant<Q4_0x16GemmFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q4_0x16_q8a_gemm__avx512_vnni),
      CPUDL_VARIANT(generic, q4_0x16_q8a_gemm__ref)};
  return v;
}
// Generation over the same panels: VPDPBUSD on 512-bit rows of the panel (quant/avx512_vnni.cpp).
const std::vector<KernelVariant<Q8_0x16GemvFn>>& q8_0x16_q8a_gemv_variants() {
  static const std::vector<KernelVariant<Q8_0x16GemvFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q8_0x16_q8a_gemv__avx512_vnni),
      CPUDL_VARIANT(generic, q8_0x16_q8a_gemv__ref)};
  return v;
}
const std::vector<KernelVariant<Q4_0x16GemvFn>>& q4_0x16_q8a_gemv_variants() {
  static const std::vector<KernelVariant<Q4_0x16GemvFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q4_0x16_q8a_gemv__avx512_vnni),
      CPUDL_VARIANT(generic, q4_0x16_q8a_gemv__ref)};
  return v;
}
const std::vector<KernelVariant<Q4_Kx16GemvFn>>& q4_kx16_q8_k_gemv_variants() {
  static const std::vector<KernelVariant<Q4_Kx16GemvFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q4_kx16_q8_k_gemv__avx512_vnni),
      CPUDL_VARIANT(generic, q4_kx16_q8_k_gemv__ref)};
  return v;
}
const std::vector<KernelVariant<Q4_Kx16GemmFn>>& q4_kx16_q8_k_gemm_variants() {
  static const std::vector<KernelVariant<Q4_Kx16GemmFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q4_kx16_q8_k_gemm__avx512_vnni),
      CPUDL_VARIANT(generic, q4_kx16_q8_k_gemm__ref)};
  return v;
}
const std::vector<KernelVariant<Q6_Kx16GemvFn>>& q6_kx16_q8_k_gemv_variants() {
  static const std::vector<KernelVariant<Q6_Kx16GemvFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q6_kx16_q8_k_gemv__avx512_vnni),
      CPUDL_VARIANT(generic, q6_kx16_q8_k_gemv__ref)};
  return v;
}
const std::vector<KernelVariant<Q6_Kx16GemmFn>>& q6_kx16_q8_k_gemm_variants() {
  static const std::vector<KernelVariant<Q6_Kx16GemmFn>> v = {
      CPUDL_VARIANT(avx512_vnni, q6_kx16_q8_k_gemm__avx512_vnni),
      CPUDL_VARIANT(generic, q6_kx16_q8_k_gemm__ref)};
  return v;
}
const std::vector<KernelVariant<PackQ6_Kx16Fn>>& pack_q6_kx16_variants() {
  static const std::vector<KernelVariant<PackQ6_Kx16Fn>> v = {CPUDL_VARIANT(avx512, pack_q6_kx16__avx512),
                                                              CPUDL_VARIANT(generic, pack_q6_kx16__ref)};
  return v;
}
const std::vector<KernelVariant<PackQ4_Kx16Fn>>& pack_q4_kx16_variants() {
  static const std::vector<KernelVariant<PackQ4_Kx16Fn>> v = {CPUDL_VARIANT(avx512, pack_q4_kx16__avx512),
                                                              CPUDL_VARIANT(generic, pack_q4_kx16__ref)};
  return v;
}
const std::vector<KernelVariant<PackQ4_0x16Fn>>& pack_q4_0x16_nibbles_variants() {
  static const std::vector<KernelVariant<PackQ4_0x16Fn>> v = {
      CPUDL_VARIANT(avx512, pack_q4_0x16_nibbles__avx512), CPUDL_VARIANT(generic, pack_q4_0x16_nibbles__ref)};
  return v;
}
const std::vector<KernelVariant<PackQ8_0x16Fn>>& pack_q8_0x16_variants() {
  static const std::vector<KernelVariant<PackQ8_0x16Fn>> v = {CPUDL_VARIANT(avx512, pack_q8_0x16__avx512),
                                                              CPUDL_VARIANT(generic, pack_q8_0x16__ref)};
  return v;
}
const std::vector<KernelVariant<PackQ8_0x16Fn>>& pack_q4_0x16_variants() {
  static const std::vector<KernelVariant<PackQ8_0x16Fn>> v = {CPUDL_VARIANT(avx512, pack_q4_0x16__avx512),
                                                              CPUDL_VARIANT(generic, pack_q4_0x16__ref)};
  return v;
}

#define CPUDL_AVX2_VARIANTS(kernel, Fn)                                                      \
  const std::vector<KernelVariant<Fn>>& kernel##_variants() {                                \
    static const std::vector<KernelVariant<Fn>> v = {CPUDL_VARIANT(avx2, kernel##__avx2),    \
                                                     CPUDL_VARIANT(generic, kernel##__ref)}; \
    return v;                                                                                \
  }
CPUDL_AVX2_VARIANTS(f32_f32_matmul, WeightMatmulFn)
CPUDL_AVX2_VARIANTS(f16_f32_matmul, WeightMatmulFn)
CPUDL_AVX2_VARIANTS(bf16_f32_matmul, WeightMatmulFn)
CPUDL_AVX2_VARIANTS(pack_q4_0x8, PackQ4_0x8Fn)
CPUDL_AVX2_VARIANTS(pack_q8_0x8, PackQ8_0x8Fn)
CPUDL_AVX2_VARIANTS(quantize_row_q8a, QuantizeRowFn)
CPUDL_AVX2_VARIANTS(dequantize_row_f16, DequantizeRowFn)
CPUDL_AVX2_VARIANTS(dequantize_row_bf16, DequantizeRowFn)
CPUDL_AVX2_VARIANTS(dequantize_row_q8_0, DequantizeRowFn)
CPUDL_AVX2_VARIANTS(dequantize_row_q4_0, DequantizeRowFn)
CPUDL_AVX2_VARIANTS(dequantize_row_q4_k, DequantizeRowFn)
CPUDL_AVX2_VARIANTS(dequantize_row_q6_k, DequantizeRowFn)
CPUDL_AVX2_VARIANTS(q4_k_q8_k_matmul, WeightMatmulFn)
CPUDL_AVX2_VARIANTS(q6_k_q8_k_matmul, WeightMatmulFn)
CPUDL_AVX2_VARIANTS(quantize_row_q8_k, QuantizeRowFn)
// Dynamic int8 products: VNNI's VPDPBUSD (int8.h), AVX2, the reference; the range and the
// quantiser are memory-bound passes, AVX2 serves them.
CPUDL_VNNI_VARIANTS(u8s8_gemm, U8S8GemmFn)
#undef CPUDL_VNNI_VARIANTS
CPUDL_AVX2_VARIANTS(f32_min_max, F32MinMaxFn)
CPUDL_AVX2_VARIANTS(f32_quantize_u8, F32QuantizeU8Fn)
// A memory-bound transpose: AVX-512 registers would not move memory faster.
CPUDL_AVX2_VARIANTS(f32_transpose, F32TransposeFn)
// Few-input-channel weight gradients: AVX2 (an AVX-512 variant is not written yet).
CPUDL_AVX2_VARIANTS(f32_conv_backward_weights_nhwc, ConvBackwardWeightsFn)
// Winograd convolution: the transforms on AVX2 (memory-bound, eight channels per group of the
// layout); the two products, where the arithmetic is, on AVX-512 too.
CPUDL_STANDARD_VARIANTS(f32_winograd_gemm, WinogradGemmFn)
CPUDL_STANDARD_VARIANTS(f32_winograd_gemm_weights, WinogradGemmWeightsFn)
CPUDL_AVX2_VARIANTS(f32_winograd_input_4x3, WinogradInputFn)
CPUDL_AVX2_VARIANTS(f32_winograd_input_2x3, WinogradInputFn)
CPUDL_AVX2_VARIANTS(f32_winograd_output_4x3, WinogradOutputFn)
CPUDL_AVX2_VARIANTS(f32_winograd_output_2x3, WinogradOutputFn)
CPUDL_AVX2_VARIANTS(f32_winograd_weights_4x3, WinogradWeightsFn)
CPUDL_AVX2_VARIANTS(f32_winograd_weights_2x3, WinogradWeightsFn)
CPUDL_AVX2_VARIANTS(f32_winograd_output_grad_4x3, WinogradOutputGradFn)
CPUDL_AVX2_VARIANTS(f32_winograd_weight_grad_4x3, WinogradWeightGradFn)
#undef CPUDL_AVX2_VARIANTS

// Narrow linear layers: memory-bound on a materialised activation, bound by FMAs in the fused
// first layer (ops/planar_conv.cpp), where AVX-512 pays.
CPUDL_STANDARD_VARIANTS(f32_narrow_linear_forward, NarrowLinearForwardFn)
CPUDL_STANDARD_VARIANTS(f32_narrow_linear_backward_data, NarrowLinearBackwardDataFn)
CPUDL_STANDARD_VARIANTS(f32_narrow_linear_backward_weights, NarrowLinearBackwardWeightsFn)
// Planar first-layer convolutions: AVX-512 (16 columns, 32 registers) and AVX2.
CPUDL_STANDARD_VARIANTS(f32_conv_forward_planes, ConvForwardPlanesFn)
CPUDL_STANDARD_VARIANTS(f32_conv_backward_weights_planes, ConvBackwardWeightsPlanesFn)
#undef CPUDL_STANDARD_VARIANTS
// The tap-major weight gradient's block: AVX-512 or the reference (see conv/conv.h).
const std::vector<KernelVariant<TapGemmFn>>& f32_conv_weight_grad_taps_variants() {
  static const std::vector<KernelVariant<TapGemmFn>> v = {
      CPUDL_VARIANT(avx512, f32_conv_weight_grad_taps__avx512),
      CPUDL_VARIANT(generic, f32_conv_weight_grad_taps__ref)};
  return v;
}

// Channels-last max pooling: AVX-512 (k-masked partial channel blocks, pool/avx512.cpp) and
// AVX2 forward; the AVX2 backward would need VMASKMOVPS for partial blocks (microcoded on AMD
// Zen), so AVX2 machines scatter with the reference.
const std::vector<KernelVariant<MaxPoolNhwcFn>>& f32_max_pool_nhwc_variants() {
  static const std::vector<KernelVariant<MaxPoolNhwcFn>> v = {
      CPUDL_VARIANT(avx512, f32_max_pool_nhwc__avx512), CPUDL_VARIANT(avx2, f32_max_pool_nhwc__avx2),
      CPUDL_VARIANT(generic, f32_max_pool_nhwc__ref)};
  return v;
}
const std::vector<KernelVariant<U8MaxPoolNhwcFn>>& u8_max_pool_nhwc_variants() {
  static const std::vector<KernelVariant<U8MaxPoolNhwcFn>> v = {
      CPUDL_VARIANT(avx512, u8_max_pool_nhwc__avx512), CPUDL_VARIANT(generic, u8_max_pool_nhwc__ref)};
  return v;
}
const std::vector<KernelVariant<MaxPoolNhwcBackwardFn>>& f32_max_pool_nhwc_backward_variants() {
  static const std::vector<KernelVariant<MaxPoolNhwcBackwardFn>> v = {
      CPUDL_VARIANT(avx512, f32_max_pool_nhwc_backward__avx512),
      CPUDL_VARIANT(generic, f32_max_pool_nhwc_backward__ref)};
  return v;
}

const std::vector<KernelVariant<FmaProbeFn>>& int8_dot_probe_variants() {
  static const std::vector<KernelVariant<FmaProbeFn>> v = {
      CPUDL_VARIANT(avx512_vnni, int8_dot_probe__avx512_vnni), CPUDL_VARIANT(avx512, int8_dot_probe__avx512),
      CPUDL_VARIANT(avx2, int8_dot_probe__avx2), CPUDL_VARIANT(generic, int8_dot_probe__ref)};
  return v;
}

const std::vector<KernelVariant<FmaProbeFn>>& bf16_dot_probe_variants() {
  static const std::vector<KernelVariant<FmaProbeFn>> v = {
      CPUDL_VARIANT(avx512_bf16, bf16_dot_probe__avx512_bf16), CPUDL_VARIANT(generic, bf16_dot_probe__ref)};
  return v;
}
#undef CPUDL_VARIANT

namespace {
template <class Fn>
KernelVariant<Fn> pick(const std::vector<KernelVariant<Fn>>& variants, IsaLevel level) {
  for (const auto& variant : variants)
    if (variant.level <= level) return variant;
  return variants.back();  // the reference runs everywhere
}
}  // namespace

KernelTable make_kernel_table(IsaLevel level) {
  KernelTable table;
  table.level = level;
#define CPUDL_PICK(kernel, Fn) table.kernel = pick(kernel##_variants(), level);
  CPUDL_KERNELS(CPUDL_PICK)
#undef CPUDL_PICK
  return table;
}

std::vector<std::pair<const char*, const char*>> describe(const KernelTable& table) {
  std::vector<std::pair<const char*, const char*>> out;
#define CPUDL_DESCRIBE(kernel, Fn) out.emplace_back(#kernel, table.kernel.name);
  CPUDL_KERNELS(CPUDL_DESCRIBE)
#undef CPUDL_DESCRIBE
  return out;
}

std::size_t g_streaming_store_bytes = std::size_t{32} << 20;

std::size_t streaming_store_threshold(const CpuFeatures& cpu, const SystemInfo& system) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  std::size_t l3 = system.l3_bytes.value_or(32 * kMiB);
  // A guest sees the host's whole L3 (480 MiB of a many-core Xeon here) and shares it with the
  // other guests' vCPUs. Measured on such a guest (1 thread, y = x + 1, then y read back):
  // regular stores wrote at 14-15 GB/s at every size from 1 MiB up and the read back gained
  // little from them past 2 MiB, while streaming wrote at 22-23 GB/s -- 6.1 against 9.3 ms at
  // 64 MiB, 0.61 against 0.76 ms at 4 MiB, both counting the read back. There the L3 counted on
  // is the per-core share of a server part, 2 MiB a usable core.
  if (!cpu.hypervisor.empty())
    l3 = std::min(l3,
                  2 * kMiB * static_cast<std::size_t>(std::max(1, system.usable_physical_cores.value_or(1))));
  return std::max(4 * kMiB, l3);
}

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    const Runtime& rt = runtime();
    // Per call: kernels see one thread's part.
    g_streaming_store_bytes = streaming_store_threshold(rt.cpu, rt.system);
    KernelTable t = make_kernel_table(rt.isa.active);
    if (verbose())
      for (const auto& [kernel, variant] : describe(t))
        std::fprintf(stderr, "cpudl: kernel %s -> %s (level %s)\n", kernel, variant,
                     std::string(isa_level_name(t.level)).c_str());
    return t;
  }();
  return table;
}

}  // namespace cpudl::kernels
