// The thread governor: a light thread that samples the machine's load twice a second and lowers
// the compute threads when the CPUs this process can really use shrink (a cgroup quota lowered,
// the affinity narrowed), when neighbours compete for them (CPU pressure, cgroup throttling,
// hypervisor steal) or when the CPU throttles; it raises them again once CPUs stand idle, and
// pauses the work at a critical temperature. Work picks the count up between steps or batches
// (threads(), never mid-kernel).
//
// Why: a parallel region waits at its barriers for its slowest thread. With two compute threads
// and two busy neighbours on two cores, each barrier waits for a descheduled thread's next time
// slice, and a training step takes 2.7x as long as on one thread (docs/OPERATIONS.md has the
// figures). No fixed default is right for a machine whose load changes under the process.
//
// The files come from an injectable root, so tests feed fixture trees; the policy is a pure
// function of two samples, so tests feed it sequences.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cpudl/runtime.h"

namespace cpudl {

struct Temperature {
  std::string zone;  // "thermal_zone0 (x86_pkg_temp)", "k10temp Tctl"
  double celsius = 0;
  std::optional<double> critical;  // the zone's critical trip point
};

// One reading of the machine, cumulative counters as they are (the policy takes differences).
struct LoadSample {
  double seconds = 0;                 // steady clock
  std::optional<double> quota_cpus;   // the tightest cgroup CPU quota on the way up; none: unlimited
  int affinity_cpus = 0;              // CPUs this process may run on; 0: unknown
  std::optional<double> pressure_us;  // /proc/pressure/cpu "some" total: µs someone waited for a CPU
  std::optional<std::uint64_t> cgroup_periods, cgroup_throttled_periods;
  std::optional<double> cgroup_throttled_us;   // time the quota held this cgroup's tasks back
  std::optional<CpuTimes> cpu_times;           // /proc/stat: idle and steal
  std::optional<int> runnable;                 // /proc/stat procs_running: tasks on a CPU or waiting now
  std::optional<int> own_runnable;             // of them, this process's threads (when asked for)
  std::optional<std::uint64_t> own_cpu_ticks;  // /proc/self/stat utime + stime, in /proc/stat's ticks
  std::optional<std::uint64_t> thermal_throttle_events;  // Intel's per-CPU counters, summed
  std::optional<double> frequency_ratio;                 // current over maximum frequency, mean over CPUs
  std::vector<Temperature> temperatures;
};

// Reads LoadSamples from the files under `root`. A file that exists but cannot be parsed keeps
// its last good reading, and `warn` is told once, naming the file.
class LoadSampler {
 public:
  LoadSampler(std::filesystem::path root, std::function<void(const std::string&)> warn);
  // `own` also counts this process's running threads (/proc/self/task: a look per thread, so only
  // for the probes before work starts).
  LoadSample sample(double seconds, bool own = false);

 private:
  std::optional<double> number(const std::filesystem::path& path, double scale = 1);
  std::optional<std::string> text(const std::filesystem::path& path);
  void malformed(const std::filesystem::path& path, const std::string& what);

  std::filesystem::path root_;
  std::function<void(const std::string&)> warn_;
  std::vector<std::filesystem::path> cgroup_dirs_;  // the process's cgroup first, then its parents
  std::string cgroup_version_;                      // "v1", "v2" or "" (none)
  // Temperature sensors, found once: their names and which file holds their critical point do not
  // change while the process runs, so a sample reads only the values.
  struct Sensor {
    std::string zone;                   // "thermal_zone0 (x86_pkg_temp)", "k10temp Tctl"
    std::filesystem::path temperature;  // millidegrees Celsius
    std::filesystem::path critical;     // empty when the sensor has no critical point
  };
  std::vector<Sensor> sensors_;
  std::vector<std::filesystem::path> cpu_dirs_;
  std::map<std::string, double> last_good_;
  std::optional<CpuTimes> last_cpu_times_;
  std::optional<std::uint64_t> last_own_ticks_;
  std::set<std::string> warned_;
};

struct GovernorDecision {
  int from = 0, to = 0;  // threads
  std::string reason;    // metric label: quota, affinity, pressure, cgroup_throttling, steal,
                         // thermal_throttling, frequency, temperature, idle
  std::string text;      // the log line after "governor: "
  bool pause = false, resume = false;
};

struct GovernorConfig {
  int max_threads = 1;          // the ceiling: --threads, or the usable cores
  int window = 2;               // consecutive samples a condition must hold before the count changes
  double pressure_high = 0.25;  // share of time some task waited for a CPU
  // Pressure counts only while other processes use at least this many CPUs: a server's own
  // connection threads, parsing beside its compute threads, make pressure too, and fewer compute
  // threads would only idle a CPU (ResNet-18 under wrk on two CPUs: 82 images/s on the one thread
  // the pressure rule left, 110 on two, wrk itself using 0.03 CPUs).
  double neighbour_cpus_low = 0.5;
  double throttled_high = 0.2;      // share of cgroup periods throttled
  double steal_high = 0.25;         // share of this process's CPUs' time the hypervisor took
  double frequency_low = 0.7;       // current / maximum frequency
  double idle_to_raise = 0.75;      // idle CPUs, measured, that justify one more thread
  double cool_margin_celsius = 10;  // resume once every zone is this far below its critical point
};

// The policy: fed every sample, returns a decision when the thread count or the pause changes.
class GovernorPolicy {
 public:
  explicit GovernorPolicy(const GovernorConfig& config);
  // As work starts: the tasks running beside it in quick samples over 100 ms (the fewest seen,
  // this process's own running threads taken out). Neighbours that already fill the CPUs make no
  // pressure until the work adds its threads, and a wait for the first window would cost short
  // runs their whole length; so the count drops at once to the CPUs they leave free.
  std::optional<GovernorDecision> start(const std::vector<LoadSample>& probes);
  std::optional<GovernorDecision> update(const LoadSample& now);
  int threads() const { return threads_; }
  bool paused() const { return paused_; }
  // Derived from the last two samples, for metrics: nullopt until two samples carried them.
  std::optional<double> pressure_ratio() const { return pressure_; }
  std::optional<double> steal_ratio() const { return steal_; }
  std::optional<double> idle_cpus() const { return idle_; }
  std::optional<double> neighbour_cpus() const { return neighbours_; }

 private:
  GovernorConfig config_;
  int threads_;
  bool paused_ = false;
  std::optional<LoadSample> previous_;
  std::optional<double> pressure_, steal_, idle_, neighbours_;
  int overloaded_for_ = 0, idle_for_ = 0;
};

// The tree the governor reads: "/", or CPUDL_GOVERNOR_ROOT where tests point it at a fixture tree
// (a thermal zone at its critical point) for a whole command.
std::filesystem::path governor_root();

// The steady clock in seconds: the time line of samples, decisions and the reports that mark them.
double steady_seconds();

// One decision as it happened, for reports that mark it on a time line.
struct GovernorEvent {
  double seconds = 0;  // since the governor started
  GovernorDecision decision;
};

// What the governor reports to metrics and logs.
struct GovernorStatus {
  int threads = 1;
  bool paused = false;
  std::map<std::string, std::int64_t> decisions;  // by reason
  std::optional<double> pressure_ratio, steal_ratio;
  double throttled_seconds = 0;  // cgroup throttling since the governor started
  std::vector<Temperature> temperatures;
  std::vector<GovernorEvent> events;  // every decision so far
};

struct GovernorOptions {
  std::filesystem::path root = governor_root();
  GovernorConfig config;
  double interval_seconds = 0.5;                         // between samples: a decision takes `window` of them
  std::function<void(const std::string&)> log;           // one line per decision and per unreadable file
  std::function<void(const GovernorStatus&)> on_sample;  // after every sample (metrics)
};

// The thread that samples and decides; stops when destroyed.
class Governor {
 public:
  explicit Governor(GovernorOptions options);
  ~Governor();
  Governor(const Governor&) = delete;
  Governor& operator=(const Governor&) = delete;

  // The count the next step or batch should run on.
  int threads() const { return threads_.load(std::memory_order_relaxed); }
  bool paused() const { return paused_.load(std::memory_order_relaxed); }
  // Blocks while paused (a critical temperature); returns at once otherwise.
  void wait_while_paused() const;
  GovernorStatus status() const;

 private:
  void loop();
  void record(const std::optional<GovernorDecision>& decision, double seconds);  // under mutex_

  GovernorOptions options_;
  LoadSampler sampler_;
  GovernorPolicy policy_;
  std::atomic<int> threads_;
  std::atomic<bool> paused_{false};
  mutable std::mutex mutex_;
  mutable std::condition_variable wake_;
  bool stopping_ = false;
  GovernorStatus status_;
  double start_seconds_ = 0;
  std::optional<double> first_throttled_us_;
  std::thread thread_;
};

// Runs one step or batch on the governor's current count (or `fixed` when there is no governor).
class GovernedScope {
 public:
  GovernedScope(const Governor* governor, int fixed = 0)
      : scope_(governor != nullptr ? governor->threads() : fixed) {}

 private:
  ThreadScope scope_;
};

}  // namespace cpudl
