// Loads OpenBLAS or BLIS with dlopen and calls cblas_sgemm through the integer width the library
// was built with (Debian builds 32-bit BLAS integers; a 64-bit build is detected and honoured).
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/blas/blas.h"
#include "kernels/dispatch.h"

namespace cpudl::blas {
namespace {

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using Sgemm32 = void (*)(int, int, int, std::int32_t, std::int32_t, std::int32_t, float, const float*,
                         std::int32_t, const float*, std::int32_t, float, float*, std::int32_t);
using Sgemm64 = void (*)(int, int, int, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                         std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
using SetThreads = void (*)(int);

struct Library {
  std::once_flag once;
  void* handle = nullptr;
  std::string error, description, kernel;
  void* sgemm = nullptr;
  bool int64 = false;
  SetThreads set_threads = nullptr;
  int threads_set = 0;
};

Library& library(Backend backend) {
  static Library libraries[4];  // by Backend value (onednn and native need none)
  return libraries[static_cast<int>(backend)];
}

struct Candidates {
  const char* package;
  std::vector<const char*> files;
};

Candidates candidates(Backend backend) {
  if (backend == Backend::openblas)
    return {"libopenblas0-openmp",
            {"libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
             "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"}};
  return {"libblis4-openmp",
          {"libblis.so.4", "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4",
           "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4"}};
}

}  // namespace

const char* openblas_core_for(IsaLevel level) {
  if (level >= IsaLevel::avx512_bf16) return "Cooperlake";
  if (level >= IsaLevel::avx512) return "SkylakeX";
  if (level >= IsaLevel::avx2) return "Haswell";
  return nullptr;
}

namespace {

void load(Backend backend, Library& lib) {
  const Candidates c = candidates(backend);
  // OpenBLAS picks its kernel when it is loaded, from CPU models it knows: 0.3.21 (Debian 12) took
  // an Emerald Rapids guest (family 6, model 207) for a Prescott and ran SSE3 code there, its
  // sgemm at 15-22% of the fp32 roof against 60-66% on the Cooperlake kernel it ships (`cpudl
  // bench gemm --backends openblas`, 1 thread). Unless the user chose one, name the kernel family
  // of the ISA level cpudl runs at (CPUDL_ISA caps it, as it caps oneDNN).
  const char* core = backend == Backend::openblas && !std::getenv("OPENBLAS_CORETYPE")
                         ? openblas_core_for(runtime().isa.active)
                         : nullptr;
  if (core) setenv("OPENBLAS_CORETYPE", core, 0);
  std::vector<std::string> files;
  if (const char* forced = std::getenv("CPUDL_BLAS_LIBRARY"); forced && *forced) {
    files.emplace_back(forced);
  } else {
    for (const char* f : c.files) files.emplace_back(f);
  }
  std::string tried;
  for (const std::string& file : files) {
    lib.handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) {
      lib.description = file;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + file;
  }
  const std::string name(backend_name(backend));
  if (!lib.handle) {
    lib.error = "CPUDL_BLAS=" + name + ": cannot load " + tried + " (install the Debian package " +
                c.package + ", or point CPUDL_BLAS_LIBRARY at the library)";
    return;
  }
  lib.sgemm = dlsym(lib.handle, "cblas_sgemm");
  if (!lib.sgemm) {
    lib.error = "CPUDL_BLAS=" + name + ": " + lib.description + " has no cblas_sgemm symbol";
    return;
  }
  if (backend == Backend::openblas) {
    lib.set_threads = reinterpret_cast<SetThreads>(dlsym(lib.handle, "openblas_set_num_threads"));
    using Config = const char* (*)();
    if (auto config = reinterpret_cast<Config>(dlsym(lib.handle, "openblas_get_config"))) {
      const std::string text = config();
      lib.int64 = text.find("USE64BITINT") != std::string::npos;
      lib.description += " (" + text;
      using CoreName = const char* (*)();
      if (auto name = reinterpret_cast<CoreName>(dlsym(lib.handle, "openblas_get_corename"))) {
        lib.kernel = name();
        lib.description += ", kernel " + lib.kernel;
        if (core) lib.description += std::string(" by OPENBLAS_CORETYPE=") + core + " from cpudl";
      }
      lib.description += ")";
    }
  } else {
    lib.set_threads = reinterpret_cast<SetThreads>(dlsym(lib.handle, "bli_thread_set_num_threads"));
    using IntSize = long (*)();
    if (auto size = reinterpret_cast<IntSize>(dlsym(lib.handle, "bli_info_get_blas_int_type_size")))
      lib.int64 = size() == 64;
    using Version = const char* (*)();
    using ArchName = const char* (*)(int);
    using ArchId = int (*)();
    if (auto version = reinterpret_cast<Version>(dlsym(lib.handle, "bli_info_get_version_str")))
      lib.description += std::string(" (BLIS ") + version();
    auto arch_id = reinterpret_cast<ArchId>(dlsym(lib.handle, "bli_arch_query_id"));
    auto arch_name = reinterpret_cast<ArchName>(dlsym(lib.handle, "bli_arch_string"));
    if (arch_id && arch_name) {
      lib.kernel = arch_name(arch_id());
      lib.description += ", kernel " + lib.kernel;
    }
    if (lib.description.find('(') != std::string::npos) lib.description += ")";
  }
}

}  // namespace

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::onednn:
      return "onednn";
    case Backend::openblas:
      return "openblas";
    case Backend::blis:
      return "blis";
    case Backend::native:
      return "native";
  }
  return "unknown";
}

std::string backend_names(std::string_view last_separator) {
  std::string names;
  const std::size_t count = std::size(kAllBackends);
  for (std::size_t i = 0; i < count; ++i)
    names += (i == 0           ? ""
              : i + 1 == count ? std::string(last_separator)
                               : ", ") +
             std::string(backend_name(kAllBackends[i]));
  return names;
}

Backend parse_backend(std::string_view name, std::string_view what) {
  for (Backend b : kAllBackends)
    if (backend_name(b) == name) return b;
  throw UsageError(std::string(what) + "=" + std::string(name) + ": unknown backend (expected " +
                   backend_names() + ")");
}

Backend active_backend() {
  static const Backend backend = [] {
    const char* value = std::getenv("CPUDL_BLAS");
    return value && *value ? parse_backend(value) : Backend::onednn;
  }();
  return backend;
}

bool available(Backend backend, std::string* why) {
  if (backend == Backend::onednn || backend == Backend::native) return true;
  Library& lib = library(backend);
  std::call_once(lib.once, [&] { load(backend, lib); });
  if (!lib.error.empty() && why) *why = lib.error;
  return lib.error.empty();
}

void require(Backend backend) {
  std::string why;
  if (!available(backend, &why)) throw Error(why);
}

std::string describe(Backend backend) {
  if (backend == Backend::onednn) return "oneDNN matmul";
  if (backend == Backend::native)
    return std::string("cpudl blocked SGEMM (") + kernels::kernel_table().f32_gemm_tile.name + ")";
  std::string why;
  if (!available(backend, &why)) return why;
  return library(backend).description;
}

std::string kernel_name(Backend backend) {
  if (backend == Backend::onednn || backend == Backend::native || !available(backend)) return {};
  return library(backend).kernel;
}

std::string slow_kernel_warning(Backend backend, bool cpu_has_avx512) {
  std::string kernel = kernel_name(backend);
  if (kernel.empty()) return {};
  for (char& c : kernel) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (backend == Backend::blis && kernel == "generic")
    return "BLIS " + describe(backend) +
           " does not recognise this CPU and runs its generic kernel (typically " +
           "~15% of peak): avoid CPUDL_BLAS=blis here";
  if (backend == Backend::openblas && cpu_has_avx512) {
    const bool avx512_kernel = kernel == "skylakex" || kernel == "cooperlake" || kernel == "sapphirerapids";
    // Measured here (Emerald Rapids guest, 1 thread, 1024^3): Cooperlake 60-66% of the fp32
    // roof, Haswell 32%, Prescott 15-22%.
    const char* remedy = openblas_core_for(runtime().isa.active);
    if (!avx512_kernel)
      return "OpenBLAS runs its " + kernel_name(backend) + " kernel (AVX2 or older) on this AVX-512 CPU" +
             (std::getenv("OPENBLAS_CORETYPE") ? " because OPENBLAS_CORETYPE forces it" : "") +
             ": half the speed it could reach or less" +
             (remedy ? std::string(" (unset OPENBLAS_CORETYPE for cpudl to set ") + remedy + ")" : "");
  }
  return {};
}

void cblas_sgemm(Backend backend, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                 std::int64_t k, const float* a, const float* b, float* c, bool accumulate, int threads) {
  if (backend == Backend::native)
    return native_sgemm(transpose_a, transpose_b, m, n, k, a, b, c, accumulate, threads);
  require(backend);
  Library& lib = library(backend);
  if (lib.set_threads && lib.threads_set != threads) {
    lib.set_threads(threads);
    lib.threads_set = threads;
  }
  const int ta = transpose_a ? kTrans : kNoTrans, tb = transpose_b ? kTrans : kNoTrans;
  const std::int64_t lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (lib.int64) {
    reinterpret_cast<Sgemm64>(lib.sgemm)(kRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
  } else {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
      throw Error("sgemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ": " +
                  std::string(backend_name(backend)) + " was built with 32-bit integers");
    reinterpret_cast<Sgemm32>(lib.sgemm)(kRowMajor, ta, tb, static_cast<std::int32_t>(m),
                                         static_cast<std::int32_t>(n), static_cast<std::int32_t>(k), 1.0f, a,
                                         static_cast<std::int32_t>(lda), b, static_cast<std::int32_t>(ldb),
                                         beta, c, static_cast<std::int32_t>(n));
  }
}

}  // namespace cpudl::blas
