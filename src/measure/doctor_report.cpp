// The doctor report (doctor_report.h): one JSON object that the CLI renders as text or prints.
#include "measure/doctor_report.h"

#include <string>
#include <vector>

#include "dense/blas/blas.h"
#include "dense/onednn/dense.h"
#include "dense/onednn/engine.h"
#include "kernels/dispatch.h"
#include "measure/timing.h"

namespace cpudl {
namespace {

using Json = nlohmann::ordered_json;

template <class T>
Json optional_json(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// SGEMM 1024^3 on the pool through each installed BLAS, GFLOP/s by backend.
Json measure_matmul_paths(int threads) {
  const std::int64_t n = 1024;
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  Json result = Json::object();
  std::string fastest;
  double best = 0;
  for (blas::Backend backend : blas::kAllBackends) {
    if (!blas::available(backend)) continue;
    auto call = [&] {
      if (backend == blas::Backend::onednn)
        onednn::matmul_onednn(onednn::MatmulShape{1, n, n, n}, a.data(), b.data(), c.data());
      else
        blas::cblas_sgemm(backend, false, false, n, n, n, a.data(), b.data(), c.data(), false, threads);
    };
    const double gflops =
        2.0 * static_cast<double>(n * n * n) / bench::time_calls(call, 0.15).median_seconds * 1e-9;
    result[std::string(blas::backend_name(backend))] = gflops;
    if (gflops > best) best = gflops, fastest = blas::backend_name(backend);
  }
  return Json{{"shape", "1024x1024x1024"}, {"gflops", result}, {"fastest", fastest}};
}

}  // namespace

Json doctor_json(const Runtime& rt, const std::optional<MeasuredPeaks>& peaks) {
  const SystemInfo& sys = rt.system;
  Json j;
  j["cpudl_version"] = CPUDL_VERSION;
  j["cpu"] = {{"vendor", rt.cpu.vendor},
              {"model_name", rt.cpu.model_name},
              {"family", rt.cpu.family},
              {"model", rt.cpu.model},
              {"stepping", rt.cpu.stepping},
              {"hypervisor", rt.cpu.hypervisor.empty() ? Json(nullptr) : Json(rt.cpu.hypervisor)}};
  j["cores"] = {{"logical", sys.online_cpus.size()},
                {"physical", optional_json(sys.physical_cores)},
                {"sockets", optional_json(sys.sockets)},
                {"usable_physical", optional_json(sys.usable_physical_cores)}};
  j["caches"] = {{"l1d_bytes", optional_json(sys.l1d_bytes)},
                 {"l2_bytes", optional_json(sys.l2_bytes)},
                 {"l3_bytes", optional_json(sys.l3_bytes)}};
  Json numa = Json::array();
  for (const NumaNode& node : sys.numa_nodes)
    numa.push_back(
        {{"node", node.id}, {"cpus", node.cpus}, {"memory_bytes", optional_json(node.memory_bytes)}});
  j["numa_nodes"] = numa;
  j["memory"] = {{"total_bytes", optional_json(sys.mem_total_bytes)},
                 {"available_bytes", optional_json(sys.mem_available_bytes)},
                 {"cgroup_limit_bytes", optional_json(sys.cgroup_memory_limit_bytes)}};
  j["cgroup"] = {{"version", sys.cgroup_cpu.version},
                 {"cpu_quota", optional_json(sys.cgroup_cpu.cpus)},
                 {"source", sys.cgroup_cpu.path.empty() ? Json(nullptr) : Json(sys.cgroup_cpu.path)}};
  j["affinity"] = sys.affinity;
  Json isa, cpuid;
  for (int f = 0; f < kCpuFeatureCount; ++f) {
    const std::string name(cpu_feature_name(static_cast<CpuFeature>(f)));
    isa[name] = rt.cpu.usable[f];
    cpuid[name] = rt.cpu.cpuid[f];
  }
  j["isa"] = isa;
  j["cpuid"] = cpuid;
  j["os_state"] = {{"xsave", rt.cpu.os.xsave},
                   {"avx", rt.cpu.os.avx},
                   {"avx512", rt.cpu.os.avx512},
                   {"amx", rt.cpu.os.amx},
                   {"amx_permission", rt.cpu.os.amx_permission}};
  j["level"] = isa_level_name(rt.isa.active);
  j["detected_level"] = isa_level_name(rt.isa.detected);
  j["level_reason"] = rt.isa.reason;
  j["threads"] = rt.threads.threads;
  j["threads_reason"] = rt.threads.reason;
  // Where --bind cores would pin the default count of threads.
  const Placement placement = plan_placement(rt.system, rt.threads.threads);
  j["placement"] = {{"cpus", placement.cpus}, {"nodes", placement.nodes}, {"text", placement.text}};
  Json kernels_json;
  for (const auto& [kernel, variant] : kernels::describe(kernels::kernel_table()))
    kernels_json[kernel] = variant;
  j["kernels"] = kernels_json;
  j["frequency_governor"] = optional_json(sys.frequency_governor);
  j["thermal_throttle_events"] = optional_json(sys.thermal_throttle_events);
  std::vector<std::string> warnings = performance_warnings(rt.cpu, sys, rt.threads, process_environment());
  for (blas::Backend backend : {blas::Backend::openblas, blas::Backend::blis})
    if (std::string w = blas::slow_kernel_warning(backend, rt.cpu.has(CpuFeature::avx512f)); !w.empty())
      warnings.push_back(std::move(w));
  j["warnings"] = warnings;
  Json libraries = Json::object();
  for (blas::Backend backend : blas::kAllBackends)
    libraries[std::string(blas::backend_name(backend))] =
        blas::available(backend) ? Json(blas::describe(backend)) : Json(nullptr);
  j["blas"] = {{"active", blas::backend_name(blas::active_backend())},
               {"libraries", libraries},
               {"onednn_version", onednn::version()}};
  if (peaks) {
    j["measured"] = {{"threads", peaks->threads},
                     {"fp32_gflops_one_core", peaks->fp32_gflops_one_core},
                     {"fp32_gflops_all_cores", peaks->fp32_gflops_all_cores},
                     {"bandwidth_gbs_one_core", peaks->bandwidth_gbs_one_core},
                     {"bandwidth_gbs_all_cores", peaks->bandwidth_gbs_all_cores},
                     {"fma_kernel", peaks->fma_kernel},
                     {"bandwidth_kernel", peaks->bandwidth_kernel},
                     {"steal_pct", peaks->steal_share ? Json(100.0 * *peaks->steal_share) : Json(nullptr)},
                     {"cpu_share_pct", peaks->cpu_share ? Json(100.0 * *peaks->cpu_share) : Json(nullptr)},
                     {"load_average", optional_json(peaks->load_average)},
                     {"matmul", measure_matmul_paths(peaks->threads)}};
    if (std::string w = competition_warning(*peaks); !w.empty()) j["warnings"].push_back(std::move(w));
  }
  return j;
}

}  // namespace cpudl
