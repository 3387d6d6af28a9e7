// Fills the kernel table. Adding a kernel: declare its variants in its family header, list them
// here best first, and add it to CPUDL_KERNELS in dispatch.h.
#include "kernels/dispatch.h"

#include <cstdio>

#include "kernels/eltwise/eltwise.h"
#include "kernels/probe/probe.h"

namespace cpudl::kernels {

#define CPUDL_VARIANT(level, fn) \
  { IsaLevel::level, #fn, fn }

const std::vector<KernelVariant<F32BinaryFn>>& f32_add_variants() {
  static const std::vector<KernelVariant<F32BinaryFn>> v = {
      CPUDL_VARIANT(avx512, f32_add__avx512), CPUDL_VARIANT(avx2, f32_add__avx2),
      CPUDL_VARIANT(generic, f32_add__ref)};
  return v;
}

const std::vector<KernelVariant<F32BinaryFn>>& f32_mul_variants() {
  static const std::vector<KernelVariant<F32BinaryFn>> v = {
      CPUDL_VARIANT(avx512, f32_mul__avx512), CPUDL_VARIANT(avx2, f32_mul__avx2),
      CPUDL_VARIANT(generic, f32_mul__ref)};
  return v;
}

const std::vector<KernelVariant<F32UnaryFn>>& f32_relu_variants() {
  static const std::vector<KernelVariant<F32UnaryFn>> v = {
      CPUDL_VARIANT(avx512, f32_relu__avx512), CPUDL_VARIANT(avx2, f32_relu__avx2),
      CPUDL_VARIANT(generic, f32_relu__ref)};
  return v;
}

const std::vector<KernelVariant<F32ReduceFn>>& f32_sum_variants() {
  static const std::vector<KernelVariant<F32ReduceFn>> v = {
      CPUDL_VARIANT(avx512, f32_sum__avx512), CPUDL_VARIANT(avx2, f32_sum__avx2),
      CPUDL_VARIANT(generic, f32_sum__ref)};
  return v;
}

const std::vector<KernelVariant<FmaProbeFn>>& f32_fma_probe_variants() {
  static const std::vector<KernelVariant<FmaProbeFn>> v = {
      CPUDL_VARIANT(avx512, f32_fma_probe__avx512), CPUDL_VARIANT(avx2, f32_fma_probe__avx2),
      CPUDL_VARIANT(generic, f32_fma_probe__ref)};
  return v;
}
const std::vector<KernelVariant<FmaProbeFn>>& int8_dot_probe_variants() {
  static const std::vector<KernelVariant<FmaProbeFn>> v = {
      CPUDL_VARIANT(avx512_vnni, int8_dot_probe__avx512_vnni), CPUDL_VARIANT(avx512, int8_dot_probe__avx512),
      CPUDL_VARIANT(avx2, int8_dot_probe__avx2), CPUDL_VARIANT(generic, int8_dot_probe__ref)};
  return v;
}

const std::vector<KernelVariant<FmaProbeFn>>& bf16_dot_probe_variants() {
  static const std::vector<KernelVariant<FmaProbeFn>> v = {CPUDL_VARIANT(avx512_bf16, bf16_dot_probe__avx512_bf16),
                                                           CPUDL_VARIANT(generic, bf16_dot_probe__ref)};
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

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t = make_kernel_table(runtime().isa.active);
    if (verbose())
      for (const auto& [kernel, variant] : describe(t))
        std::fprintf(stderr, "cpudl: kernel %s -> %s (level %s)\n", kernel, variant,
                     std::string(isa_level_name(t.level)).c_str());
    return t;
  }();
  return table;
}

}  // namespace cpudl::kernels
