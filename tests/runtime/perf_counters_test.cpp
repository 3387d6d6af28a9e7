// The pool threads' counters (perf_counters.h): the software ones against the CPU clock of the
// threads that did the work, the hardware ones where the machine exposes them (or why not).
#include "runtime/perf_counters.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cerrno>
#include <ctime>

namespace cpudl {
namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Busy work on two pool threads; returns the CPU seconds they spent by their own clocks.
double busy_on_the_pool() {
  double seconds[2] = {0, 0};
  const ThreadScope scope(2);
#pragma omp parallel num_threads(2)
  {
    const double start = thread_cpu_seconds();
    volatile double x = 0;
    for (int i = 0; i < 150'000'000; ++i) x = x + i * 0.5;
      // The wait for the other thread is the threads' CPU time too (OpenMP spins at barriers).
#pragma omp barrier
    seconds[omp_get_thread_num()] = thread_cpu_seconds() - start;
  }
  return seconds[0] + seconds[1];
}

TEST(PerfCounters, SoftwareCountersAgreeWithTheThreadsCpuClocks) {
  ThreadCounters& counters = ThreadCounters::open(2);
  if (!counters.software()) GTEST_SKIP() << "perf_event_open is refused here even for software events";
  const CounterReading before = counters.read();
  const double cpu = busy_on_the_pool();
  const CounterReading spent = counters.read() - before;
  // The counters also see the pool's spinning before and after the region: a few milliseconds.
  EXPECT_NEAR(spent.task_seconds, cpu, 0.1 * cpu + 0.02);
  EXPECT_GE(spent.context_switches, 0);
}

TEST(PerfCounters, HardwareCountersCountTheWorkOrSayWhyNot) {
  ThreadCounters& counters = ThreadCounters::open(2);
  if (!counters.hardware()) {
    EXPECT_NE(counters.unavailable_reason().find("perf_event_open"), std::string::npos)
        << counters.unavailable_reason();
    GTEST_SKIP() << "hardware counters unavailable here: " << counters.unavailable_reason();
  }
  const CounterReading before = counters.read();
  busy_on_the_pool();
  const CounterReading spent = counters.read() - before;
  // 300 million loop iterations: at least an add, a multiply, a compare and a branch each.
  EXPECT_GT(spent.instructions, 1.2e9);
  EXPECT_GT(spent.cycles, 3e8);
  EXPECT_GT(spent.instructions / spent.cycles, 0.1);
  EXPECT_LE(spent.cache_misses, spent.cache_references);
}

TEST(PerfCounters, ErrorsSayWhatToChange) {
  EXPECT_EQ(perf_event_error_text(ENOENT, 2),
            "this CPU or virtual machine exposes none: perf_event_open ENOENT");
  EXPECT_EQ(
      perf_event_error_text(EACCES, 3),
      "kernel.perf_event_paranoid=3 forbids them: perf_event_open EACCES; set it to 2 or lower, or grant "
      "CAP_PERFMON");
  EXPECT_NE(perf_event_error_text(ENOSYS, 2).find("seccomp"), std::string::npos);
}

}  // namespace
}  // namespace cpudl
