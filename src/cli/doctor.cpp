// `cpudl doctor`: what this machine is, what cpudl will do on it, and what slows it down.
// The JSON object is the single source: the text report is rendered from it.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/progress.h"
#include "cpudl/runtime.h"
#include "measure/doctor_report.h"

namespace cpudl::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string bytes_text(const Json& value) {
  return value.is_null() ? "unknown" : byte_size_text(value.get<std::uint64_t>());
}

std::string text(const Json& value) {
  if (value.is_null()) return "unknown";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

std::string cpu_list_text(const Json& cpus) {
  // Compress [0,1,2,3,8] to "0-3,8", as Linux writes it.
  std::string out;
  const auto list = cpus.get<std::vector<int>>();
  for (std::size_t i = 0; i < list.size();) {
    std::size_t j = i;
    while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(list[i]);
    if (j > i) out += "-" + std::to_string(list[j]);
    i = j + 1;
  }
  return out.empty() ? "unknown" : out;
}

void print_text(const Json& j) {
  const Json& cpu = j["cpu"];
  std::printf("cpudl %s doctor\n\n", j["cpudl_version"].get<std::string>().c_str());
  std::printf("CPU        %s (%s, family %d model %d stepping %d)\n", text(cpu["model_name"]).c_str(),
              text(cpu["vendor"]).c_str(), cpu["family"].get<int>(), cpu["model"].get<int>(),
              cpu["stepping"].get<int>());
  std::printf("Hypervisor %s\n", cpu["hypervisor"].is_null() ? "none" : text(cpu["hypervisor"]).c_str());
  std::printf("Cores      %s logical, %s physical, %s socket(s); %s physical usable by this process\n",
              text(j["cores"]["logical"]).c_str(), text(j["cores"]["physical"]).c_str(),
              text(j["cores"]["sockets"]).c_str(), text(j["cores"]["usable_physical"]).c_str());
  std::printf("Caches     L1d %s, L2 %s, L3 %s (per instance)\n",
              bytes_text(j["caches"]["l1d_bytes"]).c_str(), bytes_text(j["caches"]["l2_bytes"]).c_str(),
              bytes_text(j["caches"]["l3_bytes"]).c_str());
  if (j["numa_nodes"].empty()) std::printf("NUMA       unknown\n");
  for (const Json& node : j["numa_nodes"])
    std::printf("NUMA       node %d: CPUs %s, memory %s\n", node["node"].get<int>(),
                cpu_list_text(node["cpus"]).c_str(), bytes_text(node["memory_bytes"]).c_str());
  std::printf(
      "Memory     %s total, %s available, cgroup limit %s\n", bytes_text(j["memory"]["total_bytes"]).c_str(),
      bytes_text(j["memory"]["available_bytes"]).c_str(),
      j["memory"]["cgroup_limit_bytes"].is_null() ? "none"
                                                  : bytes_text(j["memory"]["cgroup_limit_bytes"]).c_str());
  std::printf("cgroup     %s, CPU quota %s\n", text(j["cgroup"]["version"]).c_str(),
              j["cgroup"]["cpu_quota"].is_null() ? "none" : text(j["cgroup"]["cpu_quota"]).c_str());
  std::printf("Affinity   CPUs %s\n", cpu_list_text(j["affinity"]).c_str());
  std::printf("OS state   AVX %s, AVX-512 %s, AMX %s (permission %s)\n", j["os_state"]["avx"] ? "on" : "off",
              j["os_state"]["avx512"] ? "on" : "off", j["os_state"]["amx"] ? "on" : "off",
              j["os_state"]["amx_permission"] ? "granted" : "no");
  std::printf("\nInstruction sets (usable = CPUID and OS state):\n");
  int column = 0;
  for (const auto& [name, usable] : j["isa"].items()) {
    const bool advertised = j["cpuid"][name].get<bool>();
    const char* mark = usable.get<bool>() ? "yes" : (advertised ? "no (OS)" : "no");
    std::printf("  %-12s %-8s%s", name.c_str(), mark, ++column % 3 == 0 ? "\n" : "");
  }
  if (column % 3 != 0) std::printf("\n");
  std::printf("\nKernel level  %s  (%s)\n", text(j["level"]).c_str(), text(j["level_reason"]).c_str());
  std::printf("Threads       %s  (%s)\n", text(j["threads"]).c_str(), text(j["threads_reason"]).c_str());
  std::printf("Kernels      ");
  for (const auto& [kernel, variant] : j["kernels"].items()) std::printf(" %s", text(variant).c_str());
  std::printf("\nPlacement     --bind cores: %s (default --bind none: threads float)\n",
              text(j["placement"]["text"]).c_str());
  std::printf("Frequency     cpufreq governor %s\n",
              j["frequency_governor"].is_null() ? "not readable" : text(j["frequency_governor"]).c_str());
  std::printf("BLAS          %s active (CPUDL_BLAS); oneDNN %s", text(j["blas"]["active"]).c_str(),
              text(j["blas"]["onednn_version"]).c_str());
  for (const auto& [backend, library] : j["blas"]["libraries"].items())
    if (backend != "onednn")
      std::printf("; %s: %s", backend.c_str(), library.is_null() ? "not installed" : text(library).c_str());
  std::printf("\n");
  std::printf("Throttling    %s\n", j["thermal_throttle_events"].is_null()
                                        ? "no counters"
                                        : (text(j["thermal_throttle_events"]) + " events").c_str());
  if (j.contains("measured")) {
    const Json& m = j["measured"];
    std::printf("\nMeasured (%s, %s):\n", text(m["fma_kernel"]).c_str(), text(m["bandwidth_kernel"]).c_str());
    std::printf("  fp32 FMA peak   %.1f GFLOP/s on 1 core, %.1f GFLOP/s on %d threads\n",
                m["fp32_gflops_one_core"].get<double>(), m["fp32_gflops_all_cores"].get<double>(),
                m["threads"].get<int>());
    std::printf("  memory read     %.1f GB/s on 1 core, %.1f GB/s on %d threads\n",
                m["bandwidth_gbs_one_core"].get<double>(), m["bandwidth_gbs_all_cores"].get<double>(),
                m["threads"].get<int>());
    if (!m["steal_pct"].is_null())
      std::printf(
          "  hypervisor steal %.0f%% of the probing threads' time (above a few %%, the roofs read low)\n",
          m["steal_pct"].get<double>());
    if (!m["cpu_share_pct"].is_null()) {
      std::printf("  CPU time        the probes ran %.0f%% of %d threads' time",
                  m["cpu_share_pct"].get<double>(), m["threads"].get<int>());
      if (!m["load_average"].is_null())
        std::printf(" (load average %.2f before)", m["load_average"].get<double>());
      std::printf("\n");
    }
    std::printf("  matmul %s    ", m["matmul"]["shape"].get<std::string>().c_str());
    for (const auto& [backend, gflops] : m["matmul"]["gflops"].items())
      std::printf(" %s %.1f GFLOP/s;", backend.c_str(), gflops.get<double>());
    std::printf(" fastest: %s\n", m["matmul"]["fastest"].get<std::string>().c_str());
  }
  std::printf("\nWarnings:%s\n", j["warnings"].empty() ? " none" : "");
  for (const Json& w : j["warnings"]) std::printf("  - %s\n", w.get<std::string>().c_str());
}

}  // namespace

void add_doctor_command(CLI::App& app, Action& action) {
  CLI::App* doctor =
      app.add_subcommand("doctor", "Report the CPU, memory, limits and the kernels cpudl will use");
  auto json = std::make_shared<bool>(false);
  auto measure = std::make_shared<bool>(false);
  doctor->add_flag("--json", *json, "Print one JSON object (keys documented in docs/CLI.md)");
  doctor->add_flag("--measure", *measure, "Also measure the fp32 FMA peak and memory bandwidth (~2 s)");
  doctor->callback([&action, json, measure] {
    action = [json, measure] {
      const Runtime& rt = runtime();
      std::optional<MeasuredPeaks> peaks;
      if (*measure) {
        Progress progress("doctor --measure", 4, !*json);
        peaks = measure_peaks(1.5, [&](int done, int, const char* name) { progress.update(done, name); });
      }
      const Json report = doctor_json(rt, peaks);
      if (*json)
        std::printf("%s\n", report.dump(2).c_str());
      else
        print_text(report);
      return 0;
    };
  });
}

}  // namespace cpudl::cli
