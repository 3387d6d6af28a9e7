// Switchable BLAS for matmul, as CPU deep-learning guides advise trying: CPUDL_BLAS=onednn (the
// default), openblas or blis. OpenBLAS and BLIS are loaded at run time (dlopen of their CBLAS
// symbols), so neither is a dependency; a missing one is a clear error naming the package.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cpudl/runtime.h"

namespace cpudl::kernels {
struct GemmTile;
}

namespace cpudl::blas {

enum class Backend : int { onednn = 0, openblas = 1, blis = 2, native = 3 };
inline constexpr Backend kAllBackends[] = {Backend::onednn, Backend::native, Backend::openblas,
                                           Backend::blis};

std::string_view backend_name(Backend backend);
// Parses a backend name; UsageError naming `what` (the variable or flag) and every valid name.
Backend parse_backend(std::string_view name, std::string_view what = "CPUDL_BLAS");
// "onednn, native, openblas or blis": the names kAllBackends holds, for messages and help.
std::string backend_names(std::string_view last_separator = " or ");
// The backend CPUDL_BLAS selects (read once).
Backend active_backend();

// Loads the backend's library if it is not loaded yet. Throws Error naming the library and the
// Debian package to install when it cannot be loaded. CPUDL_BLAS_LIBRARY=/path/lib.so overrides
// the library file for openblas and blis.
void require(Backend backend);
// Whether it can be loaded, and if not, why (the message require() would throw).
bool available(Backend backend, std::string* why = nullptr);
// What was loaded: "libopenblas.so.0 (OpenBLAS 0.3.21 ... Haswell)".
std::string describe(Backend backend);

// The kernel family a CBLAS library picked for this CPU ("Zen", "Haswell", "zen3", "generic"),
// or empty when it does not say.
std::string kernel_name(Backend backend);
// A warning when an installed library would run a kernel older than the CPU supports (OpenBLAS
// forced or defaulted to AVX2 kernels on an AVX-512 CPU, BLIS falling back to its generic
// kernel). Empty when all is well or the library is not installed.
std::string slow_kernel_warning(Backend backend, bool cpu_has_avx512);
// The OpenBLAS kernel family (OPENBLAS_CORETYPE) for an ISA level, or null below AVX2. Set before
// OpenBLAS is loaded unless the user set OPENBLAS_CORETYPE: OpenBLAS's own choice falls back to
// SSE3 code on CPUs newer than its tables (cblas_loader.cpp).
const char* openblas_core_for(IsaLevel level);

// cpudl's own blocked SGEMM on the kernel table's microkernel (native_gemm.cpp): same contract
// as cblas_sgemm, on the OpenMP pool; products with up to 16 columns and k >= 256 (op(A)
// untransposed) go to the narrow linear kernel instead. The second form runs a given tile (tests
// run each) on any shape, with nc_block columns of B packed at a time (0: half the L2's worth).
void native_sgemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  const float* a, const float* b, float* c, bool accumulate, int threads);
void native_sgemm(const kernels::GemmTile& tile, bool transpose_a, bool transpose_b, std::int64_t m,
                  std::int64_t n, std::int64_t k, const float* a, const float* b, float* c, bool accumulate,
                  int threads, std::int64_t nc_block = 0);

// Row-major C[m x n] = op(A) op(B) (+ C when accumulate) through a CBLAS backend (openblas, blis),
// using `threads` threads of its own pool.
void cblas_sgemm(Backend backend, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                 std::int64_t k, const float* a, const float* b, float* c, bool accumulate, int threads);

}  // namespace cpudl::blas
