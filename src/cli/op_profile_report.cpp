// The per-op table that `cpudl train` and `cpudl bench model` print to stderr under
// CPUDL_PROFILE=1 (ops.h: op_profile()), with the pool threads' counters where the machine has them.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cpudl/ops.h"

namespace cpudl::cli {

std::string counter_summary(const CounterReading& c) {
  char buffer[320];
  std::string text;
  if (c.hardware && c.cycles > 0) {
    std::snprintf(
        buffer, sizeof buffer,
        "IPC %.2f (%.3g G cycles), cache misses %.1f%% of %.3g M references, %.2f branch misses per "
        "1k instructions",
        c.instructions / c.cycles, c.cycles / 1e9,
        c.cache_references > 0 ? 100 * c.cache_misses / c.cache_references : 0.0, c.cache_references / 1e6,
        c.instructions > 0 ? 1e3 * c.branch_misses / c.instructions : 0.0);
    text = buffer;
  } else {
    text = "hardware counters unavailable (" + counters_unavailable_reason() + ")";
  }
  if (c.software) {
    std::snprintf(buffer, sizeof buffer, "; %.0f context switches, %.2f CPU-seconds", c.context_switches,
                  c.task_seconds);
    text += buffer;
  }
  return text;
}

void print_op_profile(std::int64_t steps, double roof_gflops) {
  const std::vector<OpTime> profile = op_profile();
  double total = 0;
  CounterReading all;
  for (const OpTime& t : profile) total += t.seconds, all += t.counters;
  if (total <= 0) return;
  std::fprintf(stderr, "\nCPUDL_PROFILE: time per op%s; GFLOP/s of the dense ops' forward",
               steps > 0 ? " and per step" : "");
  if (roof_gflops > 0) std::fprintf(stderr, ", %% of the fp32 roof of %.0f GFLOP/s", roof_gflops);
  std::fprintf(stderr, "\n");
  // Counter columns when the hardware counters were read: IPC, cache misses per reference,
  // branch misses per 1k instructions; the scheduler's context switches whenever those were.
  const bool hardware = all.hardware && all.cycles > 0, software = all.software;
  std::fprintf(stderr, "%-9s %-24s %8s %10s %10s %7s %9s %6s", "phase", "op", "calls", "ms/call",
               steps > 0 ? "ms/step" : "ms total", "share", "GFLOP/s", "%peak");
  if (hardware) std::fprintf(stderr, " %6s %6s %7s", "IPC", "miss%", "brm/kI");
  if (software) std::fprintf(stderr, " %7s", "ctx-sw");
  std::fprintf(stderr, "\n");
  for (const OpTime& t : profile) {
    const double ms = 1e3 * t.seconds;
    const double gflops = t.flops > 0 ? t.flops / t.seconds / 1e9 : 0.0;
    std::fprintf(stderr, "%-9s %-24s %8lld %10.3f %10.3f %6.1f%%", t.phase.c_str(), t.op.c_str(),
                 static_cast<long long>(t.calls), ms / static_cast<double>(t.calls),
                 steps > 0 ? ms / static_cast<double>(steps) : ms, 100 * t.seconds / total);
    if (gflops > 0 && roof_gflops > 0)
      std::fprintf(stderr, " %9.1f %5.0f%%", gflops, 100 * gflops / roof_gflops);
    else if (gflops > 0)
      std::fprintf(stderr, " %9.1f %6s", gflops, "");
    else
      std::fprintf(stderr, " %9s %6s", "", "");
    const CounterReading& c = t.counters;
    if (hardware)
      std::fprintf(stderr, " %6.2f %5.1f%% %7.2f", c.cycles > 0 ? c.instructions / c.cycles : 0.0,
                   c.cache_references > 0 ? 100 * c.cache_misses / c.cache_references : 0.0,
                   c.instructions > 0 ? 1e3 * c.branch_misses / c.instructions : 0.0);
    if (software) std::fprintf(stderr, " %7.0f", c.context_switches);
    std::fprintf(stderr, "\n");
  }
  std::fprintf(stderr, "%-9s %-24s %8s %10s %10.3f\n", "all", "", "", "",
               steps > 0 ? 1e3 * total / static_cast<double>(steps) : 1e3 * total);
  std::fprintf(stderr, "counters: %s\n", counter_summary(all).c_str());
}

}  // namespace cpudl::cli
