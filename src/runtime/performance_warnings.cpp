// Warnings for the settings that most often cost CPU deep-learning users their speed.
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "cpudl/runtime.h"

namespace cpudl {
namespace {

// The ISA level an OpenBLAS core type's kernels use (OpenBLAS names, case-insensitive).
std::optional<IsaLevel> openblas_core_level(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"})
    if (name == avx512) return IsaLevel::avx512;
  for (const char* avx2 : {"haswell", "zen", "skylake"})
    if (name == avx2) return IsaLevel::avx2;
  for (const char* older :
       {"sandybridge", "nehalem", "core2", "penryn", "dunnington", "atom", "prescott", "katmai", "coppermine",
        "northwood", "barcelona", "bulldozer", "piledriver", "steamroller", "excavator", "opteron"})
    if (name == older) return IsaLevel::generic;
  return std::nullopt;
}

}  // namespace

std::vector<std::string> performance_warnings(const CpuFeatures& cpu, const SystemInfo& system,
                                              const ThreadPlan& threads, const EnvLookup& env) {
  std::vector<std::string> warnings;
  for (const char* name : {"CPUDL_THREADS", "OMP_NUM_THREADS"}) {
    const auto value = env(name);
    if (!value) continue;
    const int n = std::atoi(value->c_str());
    if (n > threads.usable_cores)
      warnings.push_back(std::string(name) + "=" + *value + " exceeds the " +
                         std::to_string(threads.usable_cores) +
                         " usable cores: threads will time-share cores and wait at every barrier");
  }
  if (system.cgroup_cpu.cpus && system.physical_cores &&
      *system.cgroup_cpu.cpus < static_cast<double>(*system.physical_cores)) {
    char buffer[256];
    std::snprintf(buffer, sizeof buffer,
                  "cgroup CPU quota is %.2f CPUs, below the %d physical cores: cpudl uses %d "
                  "thread%s; raise the quota to use the whole machine",
                  *system.cgroup_cpu.cpus, *system.physical_cores, threads.usable_cores,
                  threads.usable_cores == 1 ? "" : "s");
    warnings.emplace_back(buffer);
  }
  if (const auto coretype = env("OPENBLAS_CORETYPE")) {
    const auto forced = openblas_core_level(*coretype);
    IsaLevel best = best_isa_level(cpu);
    if (best > IsaLevel::avx512) best = IsaLevel::avx512;  // OpenBLAS has no VNNI/BF16 sgemm
    if (forced && *forced < best)
      warnings.push_back("OPENBLAS_CORETYPE=" + *coretype + " forces OpenBLAS onto " +
                         std::string(isa_level_name(*forced)) + " kernels, but this CPU runs " +
                         std::string(isa_level_name(best)) +
                         ": unset it for OpenBLAS (cpudl's own kernels are not affected)");
  }
  if (!cpu.hypervisor.empty())
    warnings.push_back("running under a hypervisor (" + cpu.hypervisor +
                       "): vCPUs may share physical cores with other guests, and timings drift");
  if (system.frequency_governor && *system.frequency_governor != "performance")
    warnings.push_back("CPU frequency governor is '" + *system.frequency_governor +
                       "', not 'performance': clocks ramp up late in short runs");
  if (system.thermal_throttle_events && *system.thermal_throttle_events > 0)
    warnings.push_back("the CPU has been thermally throttled " +
                       std::to_string(*system.thermal_throttle_events) +
                       " times since boot: check cooling before trusting timings");
  return warnings;
}

}  // namespace cpudl
