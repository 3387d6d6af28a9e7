// The process-wide runtime: probe the machine once, decide ISA level and threads, configure the
// one OpenMP pool. Everything after start reads these constants.
#include <malloc.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <variant>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "runtime/memory_policy.h"

namespace cpudl {

bool switched_on(const char* variable) {
  const char* value = std::getenv(variable);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

bool verbose() {
  static const bool on = [] {
    const char* value = std::getenv("CPUDL_VERBOSE");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return on;
}

// Training allocates the same activation buffers (tens of MB) every step. glibc would map each
// with mmap and unmap it on free, so every step page-faults and zeroes them again (15% of a
// SimpleCNN step in a profile). Keeping such blocks in the heap and not trimming it makes the
// second step reuse the first one's memory: +45% images/s measured. GLIBC_TUNABLES still wins.
namespace {
void keep_freed_memory() {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
}  // namespace

void use_serving_memory_policy() {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
  mallopt(M_ARENA_MAX, 4);
}

const Runtime& runtime() {
  // A bad CPUDL_ISA / CPUDL_THREADS is remembered and rethrown on every call: the process must
  // not fall back to a default the user did not ask for.
  static const std::variant<Runtime, std::string> state = []() -> std::variant<Runtime, std::string> {
    try {
      Runtime rt;
      const EnvLookup env = process_environment();
      rt.cpu = probe_cpu_features();
      rt.system = read_system_info("/");
      rt.isa = choose_isa_level(rt.cpu, env("CPUDL_ISA"));
      rt.threads = plan_threads(rt.system, env);
      omp_set_num_threads(rt.threads.threads);
      keep_freed_memory();
      omp_set_max_active_levels(1);  // no nested parallel regions: one pool, never oversubscribed
      return rt;
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
  }();
  if (const auto* message = std::get_if<std::string>(&state)) throw UsageError(*message);
  return std::get<Runtime>(state);
}

}  // namespace cpudl
