// The compute thread count: one OpenMP pool sized to the cores this process may really use.
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl {

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {
std::optional<int> parse_thread_count(const EnvLookup& env, std::string_view name) {
  const auto value = env(name);
  if (!value || value->empty()) return std::nullopt;
  // OMP_NUM_THREADS may be a nesting list ("4,2"): its first entry is the outer level.
  const std::string first = name == "OMP_NUM_THREADS" ? value->substr(0, value->find(',')) : *value;
  char* end = nullptr;
  const long n = std::strtol(first.c_str(), &end, 10);
  if (end == first.c_str() || *end != '\0' || n < 1 || n > 4096)
    throw UsageError(std::string(name) + "=" + *value + ": expected a thread count from 1 to 4096");
  return static_cast<int>(n);
}
}  // namespace

ThreadPlan plan_threads(const SystemInfo& system, const EnvLookup& env) {
  ThreadPlan plan;
  // Physical cores, not hardware threads: dense kernels saturate a core's FMA units with one
  // thread, and a sibling only competes for them.
  int usable = system.usable_physical_cores.value_or(
      system.physical_cores.value_or(static_cast<int>(std::max<std::size_t>(1, system.online_cpus.size()))));
  std::string why = std::to_string(usable) + " physical core" + (usable == 1 ? "" : "s");
  if (!system.affinity.empty() && static_cast<int>(system.affinity.size()) < usable) {
    usable = static_cast<int>(system.affinity.size());
    why = "affinity mask allows " + std::to_string(usable) + " CPU" + (usable == 1 ? "" : "s");
  }
  if (system.cgroup_cpu.cpus) {
    // A fractional quota is rounded down: a thread that the quota cannot feed stalls the others
    // at every barrier once the period's budget runs out.
    const int quota = std::max(1, static_cast<int>(std::floor(*system.cgroup_cpu.cpus + 1e-9)));
    if (quota < usable) {
      usable = quota;
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "cgroup CPU quota of %.2f CPUs", *system.cgroup_cpu.cpus);
      why = buffer;
    }
  }
  plan.usable_cores = std::max(1, usable);
  plan.threads = plan.usable_cores;
  plan.reason =
      "min(physical cores, affinity, cgroup quota) = " + std::to_string(plan.threads) + ", limited by " + why;
  if (const auto n = parse_thread_count(env, "CPUDL_THREADS")) {
    plan.threads = *n;
    plan.reason = "CPUDL_THREADS=" + std::to_string(*n);
  } else if (const auto omp = parse_thread_count(env, "OMP_NUM_THREADS")) {
    plan.threads = *omp;
    plan.reason = "OMP_NUM_THREADS=" + std::to_string(*omp);
  }
  return plan;
}

}  // namespace cpudl

namespace cpudl {

namespace {
// 0 = not set: the plan's count. Set by the CLI or a binding before work starts on other threads.
std::atomic<int> process_default_threads{0};
// 0 = no ThreadScope on this thread.
thread_local int scoped_threads = 0;

void require_thread_count(int threads, const char* what) {
  if (threads < 1 || threads > 4096)
    throw UsageError(std::string(what) + " " + std::to_string(threads) +
                     ": expected a thread count from 1 to 4096");
}
}  // namespace

int compute_threads() {
  if (scoped_threads > 0) return scoped_threads;
  const int process_default = process_default_threads.load(std::memory_order_relaxed);
  return process_default > 0 ? process_default : runtime().threads.threads;
}

void set_default_threads(int threads) {
  require_thread_count(threads, "thread count");
  process_default_threads.store(threads, std::memory_order_relaxed);
  // OpenMP keeps its count per thread: the calling thread's follows now, others' through scopes.
  omp_set_num_threads(threads);
}

ThreadScope::ThreadScope(int threads)
    : previous_scope_(scoped_threads), previous_openmp_(omp_get_max_threads()) {
  const int count = threads > 0 ? threads : compute_threads();
  if (threads != 0) require_thread_count(threads, "thread count");
  scoped_threads = count;
  if (previous_openmp_ != count) omp_set_num_threads(count);
}

ThreadScope::~ThreadScope() {
  scoped_threads = previous_scope_;
  if (omp_get_max_threads() != previous_openmp_) omp_set_num_threads(previous_openmp_);
}

void check_thread_request(int threads, const char* what) {
  require_thread_count(threads, what);
  static std::atomic<bool> warned{false};
  const int usable = runtime().threads.usable_cores;
  if (threads > usable && !warned.exchange(true))
    std::fprintf(stderr,
                 "cpudl: warning: %s %d is above the %d usable core%s: threads will wait for each other\n",
                 what, threads, usable, usable == 1 ? "" : "s");
}

}  // namespace cpudl
