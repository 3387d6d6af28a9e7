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

namespace cpudl::kernels {

using F32BinaryFn = void (*)(const float* a, const float* b, float* out, std::size_t n);
using F32UnaryFn = void (*)(const float* x, float* out, std::size_t n);
using F32ReduceFn = float (*)(const float* x, std::size_t n);
using FmaProbeFn = std::uint64_t (*)(std::uint64_t iterations, float* sink);

// X(kernel, function type)
#define CPUDL_KERNELS(X)          \
  X(f32_add, F32BinaryFn)         \
  X(f32_mul, F32BinaryFn)         \
  X(f32_relu, F32UnaryFn)         \
  X(f32_sum, F32ReduceFn)         \
  X(f32_fma_probe, FmaProbeFn)   \
  X(int8_dot_probe, FmaProbeFn)  \
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

// (kernel, chosen variant) pairs, for reports.
std::vector<std::pair<const char*, const char*>> describe(const KernelTable& table);

}  // namespace cpudl::kernels
