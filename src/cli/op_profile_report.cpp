// The per-op table that `cpudl train` and `cpudl bench model` print to stderr under
// CPUDL_PROFILE=1 (ops.h: op_profile()).
#include <algorithm>
#include <cstdio>

#include "cli/command.h"
#include "cpudl/ops.h"

namespace cpudl::cli {

void print_op_profile(std::int64_t steps, double roof_gflops) {
  const std::vector<OpTime> profile = op_profile();
  double total = 0;
  for (const OpTime& t : profile) total += t.seconds;
  if (total <= 0) return;
  std::fprintf(stderr, "\nCPUDL_PROFILE: time per op%s; GFLOP/s of the dense ops' forward",
               steps > 0 ? " and per step" : "");
  if (roof_gflops > 0) std::fprintf(stderr, ", %% of the fp32 roof of %.0f GFLOP/s", roof_gflops);
  std::fprintf(stderr, "\n");
  std::fprintf(stderr, "%-9s %-24s %8s %10s %10s %7s %9s %6s\n", "phase", "op", "calls", "ms/call",
               steps > 0 ? "ms/step" : "ms total", "share", "GFLOP/s", "%peak");
  for (const OpTime& t : profile) {
    const double ms = 1e3 * t.seconds;
    const double gflops = t.flops > 0 ? t.flops / t.seconds / 1e9 : 0.0;
    std::fprintf(stderr, "%-9s %-24s %8lld %10.3f %10.3f %6.1f%%", t.phase.c_str(), t.op.c_str(),
                 static_cast<long long>(t.calls), ms / static_cast<double>(t.calls),
                 steps > 0 ? ms / static_cast<double>(steps) : ms, 100 * t.seconds / total);
    if (gflops > 0)
      roof_gflops > 0 ? std::fprintf(stderr, " %9.1f %5.0f%%\n", gflops, 100 * gflops / roof_gflops)
                      : std::fprintf(stderr, " %9.1f\n", gflops);
    else
      std::fprintf(stderr, "\n");
  }
  std::fprintf(stderr, "%-9s %-24s %8s %10s %10.3f\n", "all", "", "", "",
               steps > 0 ? 1e3 * total / static_cast<double>(steps) : 1e3 * total);
}

}  // namespace cpudl::cli
