// The thread governor's readings and decisions from trees of sysfs/procfs files the test writes and
// changes between samples (a quota lowered, a pressure spike, a critical temperature, recovery),
// and the sampling thread itself on such a tree.
#include "runtime/governor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace cpudl {
namespace {
namespace fs = std::filesystem;

// A two-CPU machine under cgroup v2, its counters advanced by the test.
class MachineTree {
 public:
  MachineTree()
      : root_(fs::temp_directory_path() /
              ("cpudl_governor_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::remove_all(root_);
    write("proc/self/mountinfo", "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    write("proc/self/cgroup", "0::/job\n");
    write("proc/self/status", "Name:\tcpudl\nCpus_allowed_list:\t0-1\n");
    write("sys/fs/cgroup/job/cpu.max", "max 100000\n");
    for (int cpu = 0; cpu < 2; ++cpu) {
      const std::string dir = "sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/";
      write(dir + "cpufreq/scaling_cur_freq", "3000000\n");
      write(dir + "cpufreq/cpuinfo_max_freq", "3000000\n");
    }
    write("sys/class/thermal/thermal_zone0/type", "x86_pkg_temp\n");
    write("sys/class/thermal/thermal_zone0/trip_point_0_type", "passive\n");
    write("sys/class/thermal/thermal_zone0/trip_point_0_temp", "90000\n");
    write("sys/class/thermal/thermal_zone0/trip_point_1_type", "critical\n");
    write("sys/class/thermal/thermal_zone0/trip_point_1_temp", "100000\n");
    temperature(60);
    advance(0, 0, 0);
  }
  ~MachineTree() { fs::remove_all(root_); }

  const fs::path& root() const { return root_; }
  // Written whole and renamed into place, as the kernel's files change: the governor's thread
  // never reads one half written.
  void write(const std::string& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    const fs::path file = root_ / relative, temporary = file.string() + ".tmp";
    std::ofstream(temporary) << text;
    fs::rename(temporary, file);
  }
  // One second passes: `pressure` of it someone waited for a CPU, `idle_cpus` CPUs stood idle,
  // `throttled` of the cgroup's ten periods were throttled; with `own_cpus` (0 or more), this
  // process kept that many of the busy CPUs busy (proc/self/stat), other processes the rest.
  void advance(double pressure, double idle_cpus, int throttled, double own_cpus = -1) {
    pressure_us_ += pressure * 1e6;
    idle_ticks_ += static_cast<std::uint64_t>(idle_cpus * 100);
    busy_ticks_ += static_cast<std::uint64_t>((2 - idle_cpus) * 100);
    if (own_cpus >= 0) {
      own_ticks_ += static_cast<std::uint64_t>(own_cpus * 100);
      // The command name may hold spaces and parentheses: fields are counted after the last ')'.
      write("proc/self/stat", "4242 (cpudl (serve) x) R 1 4242 4242 0 -1 4194560 100 0 0 0 " +
                                  std::to_string(own_ticks_ * 3 / 4) + " " +
                                  std::to_string(own_ticks_ - own_ticks_ * 3 / 4) +
                                  " 0 0 20 0 4 0 100 1000000 200\n");
    }
    periods_ += 10;
    throttled_ += throttled;
    write("proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=" +
                                   std::to_string(static_cast<std::uint64_t>(pressure_us_)) +
                                   "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    write("proc/stat", "cpu  " + std::to_string(busy_ticks_) + " 0 0 " + std::to_string(idle_ticks_) +
                           " 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n");
    write("sys/fs/cgroup/job/cpu.stat", "usage_usec 1\nnr_periods " + std::to_string(periods_) +
                                            "\nnr_throttled " + std::to_string(throttled_) +
                                            "\nthrottled_usec " + std::to_string(throttled_ * 50000) + "\n");
  }
  void temperature(double celsius) {
    write("sys/class/thermal/thermal_zone0/temp", std::to_string(static_cast<int>(celsius * 1000)) + "\n");
  }

 private:
  static inline int counter_ = 0;
  fs::path root_;
  double pressure_us_ = 0;
  std::uint64_t own_ticks_ = 0;
  std::uint64_t idle_ticks_ = 0, busy_ticks_ = 0, periods_ = 0, throttled_ = 0;
};

// Samples one second apart through the sampler, into a policy with a ceiling of two threads.
struct Samples {
  explicit Samples(const MachineTree& tree, int max_threads = 2)
      : sampler(tree.root(), [this](const std::string& w) { warnings.push_back(w); }),
        policy(GovernorConfig{max_threads}) {}
  std::optional<GovernorDecision> step() { return policy.update(sampler.sample(++seconds)); }

  std::vector<std::string> warnings;
  LoadSampler sampler;
  GovernorPolicy policy;
  double seconds = 0;
};

TEST(LoadSampler, ReadsEveryCounterOfTheTree) {
  MachineTree tree;
  tree.write("sys/fs/cgroup/job/cpu.max", "150000 100000\n");
  tree.advance(0.4, 1, 3);
  LoadSampler sampler(tree.root(), nullptr);
  const LoadSample s = sampler.sample(1);
  EXPECT_EQ(s.affinity_cpus, 2);
  ASSERT_TRUE(s.quota_cpus);
  EXPECT_DOUBLE_EQ(*s.quota_cpus, 1.5);
  ASSERT_TRUE(s.pressure_us);
  EXPECT_DOUBLE_EQ(*s.pressure_us, 0.4e6);
  ASSERT_TRUE(s.cgroup_periods && s.cgroup_throttled_periods && s.cgroup_throttled_us);
  EXPECT_EQ(*s.cgroup_periods, 20u);
  EXPECT_EQ(*s.cgroup_throttled_periods, 3u);
  EXPECT_DOUBLE_EQ(*s.cgroup_throttled_us, 150000);
  ASSERT_TRUE(s.cpu_times);
  EXPECT_EQ(s.cpu_times->idle, 100u);
  EXPECT_EQ(s.cpu_times->cpus, 2);
  ASSERT_TRUE(s.frequency_ratio);
  EXPECT_DOUBLE_EQ(*s.frequency_ratio, 1.0);
  ASSERT_EQ(s.temperatures.size(), 1u);
  EXPECT_EQ(s.temperatures[0].zone, "thermal_zone0 (x86_pkg_temp)");
  EXPECT_DOUBLE_EQ(s.temperatures[0].celsius, 60);
  ASSERT_TRUE(s.temperatures[0].critical);
  EXPECT_DOUBLE_EQ(*s.temperatures[0].critical, 100);
}

TEST(LoadSampler, CgroupV1QuotaOnAParentFromTheCommittedFixture) {
  LoadSampler sampler(CPUDL_FIXTURES_DIR "/cgroup_v1_hybrid", nullptr);
  const LoadSample s = sampler.sample(1);
  ASSERT_TRUE(s.quota_cpus);
  EXPECT_DOUBLE_EQ(*s.quota_cpus, 2.5);  // kubepods/pod1 is unlimited; kubepods holds 2.5 CPUs
  EXPECT_EQ(s.affinity_cpus, 3);
}

TEST(LoadSampler, MalformedFileKeepsItsLastGoodReadingAndIsNamedOnce) {
  MachineTree tree;
  Samples run(tree);
  tree.temperature(70);
  run.step();
  tree.write("sys/class/thermal/thermal_zone0/temp", "garbage\n");
  tree.write("proc/pressure/cpu", "nonsense\n");
  LoadSample s = run.sampler.sample(2);
  s = run.sampler.sample(3);
  ASSERT_EQ(s.temperatures.size(), 1u);
  EXPECT_DOUBLE_EQ(s.temperatures[0].celsius, 70);
  ASSERT_TRUE(s.pressure_us);
  ASSERT_EQ(run.warnings.size(), 2u) << "one warning per file, not per sample";
  EXPECT_NE(run.warnings[0].find("proc/pressure/cpu"), std::string::npos) << run.warnings[0];
  EXPECT_NE(run.warnings[1].find("thermal_zone0/temp (expected a number, found \"garbage\")"),
            std::string::npos)
      << run.warnings[1];
}

TEST(GovernorPolicy, QuotaLoweredMidRunAppliesAtTheNextSampleAndRecoversWhenRaised) {
  MachineTree tree;
  Samples run(tree);
  EXPECT_FALSE(run.step());
  EXPECT_EQ(run.policy.threads(), 2);
  tree.write("sys/fs/cgroup/job/cpu.max", "50000 100000\n");
  tree.advance(0, 0, 5);
  const auto lowered = run.step();
  ASSERT_TRUE(lowered);
  EXPECT_EQ(lowered->reason, "quota");
  EXPECT_EQ(lowered->text, "2 -> 1 thread: cgroup quota 0.50 CPUs");
  EXPECT_EQ(run.policy.threads(), 1);
  // Throttled at one thread: nothing lower to go to, and no flapping.
  for (int i = 0; i < 4; ++i) {
    tree.advance(0, 1.5, 5);
    EXPECT_FALSE(run.step());
  }
  tree.write("sys/fs/cgroup/job/cpu.max", "max 100000\n");
  tree.advance(0, 1, 0);
  EXPECT_FALSE(run.step()) << "idle must hold for the window";
  tree.advance(0, 1, 0);
  const auto raised = run.step();
  ASSERT_TRUE(raised);
  EXPECT_EQ(raised->reason, "idle");
  EXPECT_EQ(run.policy.threads(), 2);
}

TEST(GovernorPolicy, PressureSpikeLowersOnlyWhenItLastsAndIdleCpusRaiseAgain) {
  MachineTree tree;
  Samples run(tree);
  run.step();
  tree.advance(0.6, 0, 0);
  EXPECT_FALSE(run.step()) << "one busy second is not enough";
  tree.advance(0.05, 0, 0);
  EXPECT_FALSE(run.step()) << "the window restarts when pressure clears";
  tree.advance(0.6, 0, 0);
  EXPECT_FALSE(run.step());
  tree.advance(0.5, 0, 0);
  const auto lowered = run.step();
  ASSERT_TRUE(lowered);
  EXPECT_EQ(lowered->reason, "pressure");
  EXPECT_EQ(lowered->text, "2 -> 1 thread: CPU pressure 50% for 2 samples");
  // A neighbour on the other CPU: no pressure at one thread, but no idle CPU either -> stay.
  for (int i = 0; i < 3; ++i) {
    tree.advance(0.02, 0.1, 0);
    EXPECT_FALSE(run.step());
  }
  // The neighbour ends.
  tree.advance(0, 1, 0);
  run.step();
  tree.advance(0, 1, 0);
  const auto raised = run.step();
  ASSERT_TRUE(raised);
  EXPECT_EQ(raised->text, "1 -> 2 threads: 1.0 CPUs idle for 2 samples");
}

// Pressure this process makes itself (a server's connection threads parsing beside its compute
// threads, the client using next to nothing) lowers nothing; the same pressure with a neighbour
// using a CPU does. The sampler reads this process's CPU time from proc/self/stat.
TEST(GovernorPolicy, PressureCountsOnlyWhenNeighboursUseTheCpus) {
  MachineTree tree;
  Samples run(tree);
  tree.advance(0, 0, 0, 0);
  run.step();
  for (int i = 0; i < 4; ++i) {
    tree.advance(0.5, 0, 0, 1.98);
    EXPECT_FALSE(run.step()) << "second " << i << ": our own pressure";
    ASSERT_TRUE(run.policy.neighbour_cpus());
    EXPECT_NEAR(*run.policy.neighbour_cpus(), 0.02, 1e-9);
  }
  EXPECT_EQ(run.policy.threads(), 2);
  tree.advance(0.5, 0, 0, 1.0);
  EXPECT_FALSE(run.step());
  tree.advance(0.5, 0, 0, 1.0);
  const auto lowered = run.step();
  ASSERT_TRUE(lowered);
  EXPECT_EQ(lowered->reason, "pressure");
  EXPECT_NEAR(*run.policy.neighbour_cpus(), 1.0, 1e-9);
  // A malformed stat keeps the last good reading (no neighbours measured from a gap) and is named.
  tree.write("proc/self/stat", "4242 (cpudl) R 1\n");
  const LoadSample kept = run.sampler.sample(100);
  ASSERT_TRUE(kept.own_cpu_ticks);
  EXPECT_EQ(*kept.own_cpu_ticks, 198u * 4 + 100 + 100);
  ASSERT_FALSE(run.warnings.empty());
  EXPECT_NE(run.warnings.back().find("proc/self/stat"), std::string::npos) << run.warnings.back();
}

TEST(GovernorPolicy, CriticalTemperaturePausesUntilCooledByTheMargin) {
  MachineTree tree;
  Samples run(tree);
  run.step();
  tree.temperature(99);
  EXPECT_FALSE(run.step());
  tree.temperature(101);
  const auto pause = run.step();
  ASSERT_TRUE(pause);
  EXPECT_TRUE(pause->pause);
  EXPECT_EQ(pause->reason, "temperature");
  EXPECT_EQ(pause->text, "pausing: thermal_zone0 (x86_pkg_temp) at 101.0 C, critical 100.0 C");
  EXPECT_TRUE(run.policy.paused());
  tree.temperature(95);
  EXPECT_FALSE(run.step()) << "still within the margin";
  EXPECT_TRUE(run.policy.paused());
  tree.temperature(89);
  const auto resume = run.step();
  ASSERT_TRUE(resume);
  EXPECT_TRUE(resume->resume);
  EXPECT_FALSE(run.policy.paused());
}

TEST(GovernorPolicy, ThrottlingAndFrequencySignalsLowerAQuarterAtATime) {
  MachineTree tree;
  Samples run(tree, 8);
  tree.write("proc/self/status", "Cpus_allowed_list:\t0-7\n");
  run.step();
  tree.advance(0, 0, 4);
  run.step();
  tree.advance(0, 0, 4);
  const auto throttled = run.step();
  ASSERT_TRUE(throttled);
  EXPECT_EQ(throttled->reason, "cgroup_throttling");
  EXPECT_EQ(throttled->to, 6);
  for (int cpu = 0; cpu < 2; ++cpu)
    tree.write("sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpufreq/scaling_cur_freq", "1500000\n");
  tree.advance(0, 0, 0);
  run.step();
  tree.advance(0, 0, 0);
  const auto slow = run.step();
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->reason, "frequency");
  EXPECT_EQ(slow->text, "6 -> 5 threads: CPUs at 50% of their maximum frequency for 2 samples");
}

TEST(GovernorPolicy, StartsWithTheCpusTheRunningNeighboursLeaveFree) {
  MachineTree tree;
  LoadSampler sampler(tree.root(), nullptr);
  const auto probes = [&](std::vector<int> running) {
    std::vector<LoadSample> samples;
    for (int r : running) {
      tree.write("proc/stat",
                 "cpu  100 0 0 100 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n"
                 "procs_running " +
                     std::to_string(r) + "\n");
      samples.push_back(sampler.sample(1));
    }
    return samples;
  };
  GovernorPolicy quiet(GovernorConfig{2});
  EXPECT_FALSE(quiet.start(probes({1, 2, 1, 1, 1}))) << "one look at a passing task is not a neighbour";
  EXPECT_EQ(quiet.threads(), 2);
  GovernorPolicy one(GovernorConfig{2});
  const auto d = one.start(probes({2, 2, 3, 2, 2}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->reason, "busy_at_start");
  EXPECT_EQ(d->text, "2 -> 1 thread: 1 other task running on 2 CPUs at start");
  GovernorPolicy full(GovernorConfig{2});
  ASSERT_TRUE(full.start(probes({4, 3, 3, 3, 4})));
  EXPECT_EQ(full.threads(), 1) << "never below one thread";
}

TEST(GovernorPolicy, NarrowedAffinityAppliesAtOnce) {
  MachineTree tree;
  Samples run(tree);
  run.step();
  tree.write("proc/self/status", "Cpus_allowed_list:\t1\n");
  const auto d = run.step();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->reason, "affinity");
  EXPECT_EQ(d->text, "2 -> 1 thread: affinity allows 1 CPU");
}

TEST(Governor, ThreadFollowsTheTreeLogsEachDecisionAndPausesWork) {
  MachineTree tree;
  std::mutex mutex;
  std::vector<std::string> log;
  std::vector<GovernorStatus> statuses;
  GovernorOptions options;
  options.root = tree.root();
  options.config.max_threads = 2;
  options.interval_seconds = 0.02;
  options.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    log.push_back(line);
  };
  options.on_sample = [&](const GovernorStatus& s) {
    std::lock_guard<std::mutex> lock(mutex);
    statuses.push_back(s);
  };
  Governor governor(options);
  EXPECT_EQ(governor.threads(), 2);
  tree.write("sys/fs/cgroup/job/cpu.max", "50000 100000\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (governor.threads() != 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(governor.threads(), 1);
  {
    GovernedScope scope(&governor);
    EXPECT_EQ(compute_threads(), 1);
  }
  tree.temperature(105);
  while (!governor.paused() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(governor.paused());
  std::thread cool([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    tree.temperature(50);
  });
  governor.wait_while_paused();  // returns once the governor sees the zone cool
  EXPECT_FALSE(governor.paused());
  cool.join();
  const GovernorStatus status = governor.status();
  EXPECT_EQ(status.decisions.at("quota"), 1);
  EXPECT_EQ(status.decisions.at("temperature"), 2);
  // The resume line comes before the wake-up, but a waiter may also wake spuriously: allow the
  // governor's thread a moment to finish its sample.
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (log.size() >= 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_GE(log.size(), 3u);
  EXPECT_EQ(log[2].rfind("governor: resuming", 0), 0u) << log[2];
  EXPECT_EQ(log[0], "governor: 2 -> 1 thread: cgroup quota 0.50 CPUs");
  EXPECT_EQ(log[1].rfind("governor: pausing: thermal_zone0", 0), 0u) << log[1];
  EXPECT_FALSE(statuses.empty());
}

}  // namespace
}  // namespace cpudl
