// The --threads and --governor flags, shared by every subcommand that computes.
#include <cstdio>
#include <cstdlib>

#include "cli/command.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl::cli {

CLI::Option* add_threads_option(CLI::App* app, int& threads) {
  return app->add_option("-t,--threads", threads, "Compute threads (default: usable physical cores)")
      ->check(in_range(1, 4096));
}

CLI::Option* add_max_loop_iterations_option(CLI::App* app, std::int64_t& iterations) {
  return app
      ->add_option(
          "--max-loop-iterations", iterations,
          "Most iterations an ONNX Loop may run before the run fails (default 10000); loops that end "
          "on a condition have their scan outputs planned for this many")
      ->check(in_range<std::int64_t>(1, 1000000000));
}

void use_threads(int threads) {
  if (threads <= 0) return;
  check_thread_request(threads, "--threads");
  set_default_threads(threads);
}

bool governor_wanted(const std::string& flag) {
  if (!flag.empty()) return flag == "on";
  const char* variable = std::getenv("CPUDL_GOVERNOR");
  if (variable == nullptr || *variable == '\0') return true;
  const std::string value = variable;
  if (value != "on" && value != "off") throw UsageError("CPUDL_GOVERNOR=" + value + ": expected on or off");
  return value == "on";
}

CLI::Option* add_no_repack_flag(CLI::App* app, bool& no_repack) {
  return app->add_flag(
      "--no-repack", no_repack,
      "Keep a Q8_0/Q4_0/Q4_K/Q6_K model's weights only as mapped: no AMX/VNNI panels made at load "
      "(saves that memory, at the speed of the mapped rows)");
}

bool repack_wanted(bool no_repack) {
  if (no_repack) return false;
  const char* variable = std::getenv("CPUDL_LLM_REPACK");
  if (variable == nullptr || *variable == '\0') return true;
  const std::string value = variable;
  if (value != "on" && value != "off") throw UsageError("CPUDL_LLM_REPACK=" + value + ": expected on or off");
  return value == "on";
}

CLI::Option* add_governor_option(CLI::App* app, std::string& mode) {
  return app
      ->add_option("--governor", mode,
                   "on (default, or CPUDL_GOVERNOR): lower the compute threads while other processes, a "
                   "cgroup quota or heat leave fewer CPUs, and raise them again when they clear (--threads "
                   "is then the most it uses); off: keep the count fixed")
      ->check(CLI::IsMember({"on", "off"}));
}

std::unique_ptr<Governor> start_governor(const std::string& mode, int ceiling,
                                         std::function<void(const GovernorStatus&)> on_sample) {
  if (!governor_wanted(mode)) return nullptr;
  GovernorOptions options;
  options.config.max_threads = ceiling > 0 ? ceiling : compute_threads();
  options.log = [](const std::string& line) { std::fprintf(stderr, "cpudl: %s\n", line.c_str()); };
  options.on_sample = std::move(on_sample);
  return std::make_unique<Governor>(std::move(options));
}

CLI::Option* add_bind_option(CLI::App* app, std::string& mode) {
  return app
      ->add_option("--bind", mode,
                   "cores: pin each compute thread to a physical core, the cores of one NUMA node first "
                   "(cpudl doctor shows where); none (default): let the threads float")
      ->check(CLI::IsMember({"cores", "none"}));
}

void apply_bind(const std::string& mode) {
  if (mode != "cores") return;
  const SystemInfo& system = runtime().system;
  const Placement placement = plan_placement(system, compute_threads());
  bind_compute_threads(placement, system);
  std::fprintf(stderr, "cpudl: bind: %s\n", placement.text.c_str());
}

}  // namespace cpudl::cli
