// Thread-count decisions and performance warnings, from fixture systems and fake environments.
#include <gtest/gtest.h>

#include <omp.h>

#include <atomic>
#include <barrier>
#include <map>
#include <thread>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "runtime/parallel.h"

namespace cpudl {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

SystemInfo fixture(const char* name) {
  return read_system_info(std::string(CPUDL_FIXTURES_DIR) + "/" + name);
}

TEST(PlanThreads, PhysicalCoresNotHardwareThreads) {
  const ThreadPlan plan = plan_threads(fixture("two_socket_numa"), env_of({}));
  EXPECT_EQ(plan.threads, 4);
  EXPECT_NE(plan.reason.find("physical"), std::string::npos);
}

TEST(PlanThreads, FractionalQuotaRoundsDown) {
  const ThreadPlan plan = plan_threads(fixture("cgroup_v2_quota"), env_of({}));
  EXPECT_EQ(plan.threads, 1);
  EXPECT_NE(plan.reason.find("cgroup CPU quota of 1.50"), std::string::npos) << plan.reason;
}

TEST(PlanThreads, AffinityLimits) {
  const ThreadPlan plan = plan_threads(fixture("cgroup_v1_hybrid"), env_of({}));
  EXPECT_EQ(plan.threads, 2);  // 3 allowed CPUs, quota 2.5 -> 2
  EXPECT_EQ(plan.usable_cores, 2);
}

TEST(PlanThreads, EnvironmentOverridesInOrder) {
  const SystemInfo sys = fixture("two_socket_numa");
  EXPECT_EQ(plan_threads(sys, env_of({{"OMP_NUM_THREADS", "3"}})).threads, 3);
  EXPECT_EQ(plan_threads(sys, env_of({{"OMP_NUM_THREADS", "6,2"}})).threads, 6);
  const ThreadPlan both = plan_threads(sys, env_of({{"OMP_NUM_THREADS", "3"}, {"CPUDL_THREADS", "2"}}));
  EXPECT_EQ(both.threads, 2);
  EXPECT_EQ(both.reason, "CPUDL_THREADS=2");
  EXPECT_EQ(both.usable_cores, 4);
}

TEST(PlanThreads, MalformedOverrideIsAUsageError) {
  const SystemInfo sys = fixture("two_socket_numa");
  for (const char* bad : {"0", "-1", "two", "4x", "100000"}) {
    EXPECT_THROW(plan_threads(sys, env_of({{"CPUDL_THREADS", bad}})), UsageError) << bad;
    EXPECT_THROW(plan_threads(sys, env_of({{"OMP_NUM_THREADS", bad}})), UsageError) << bad;
  }
}

TEST(PlanThreads, UnknownTopologyStillGivesOneThread) {
  EXPECT_EQ(plan_threads(fixture("does-not-exist"), env_of({})).threads, 1);
}

bool mentions(const std::vector<std::string>& warnings, const std::string& text) {
  for (const auto& w : warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

CpuFeatures cpu_with(std::initializer_list<CpuFeature> features) {
  CpuFeatures cpu;
  for (CpuFeature f : features) cpu.cpuid[static_cast<int>(f)] = cpu.usable[static_cast<int>(f)] = true;
  return cpu;
}

TEST(PerformanceWarnings, NameWhatSlowsPeopleDown) {
  using F = CpuFeature;
  const CpuFeatures avx512_cpu = cpu_with(
      {F::avx, F::avx2, F::fma, F::f16c, F::avx512f, F::avx512cd, F::avx512bw, F::avx512dq, F::avx512vl});
  const SystemInfo sys = fixture("cgroup_v2_quota");
  const auto env = env_of({{"OMP_NUM_THREADS", "8"}, {"OPENBLAS_CORETYPE", "Haswell"}});
  const auto warnings = performance_warnings(avx512_cpu, sys, plan_threads(sys, env_of({})), env);
  EXPECT_TRUE(mentions(warnings, "OMP_NUM_THREADS=8 exceeds the 1 usable cores"));
  EXPECT_TRUE(mentions(warnings, "cgroup CPU quota is 1.50 CPUs"));
  EXPECT_TRUE(mentions(warnings, "OPENBLAS_CORETYPE=Haswell forces OpenBLAS onto avx2"));

  // Haswell kernels are the right ones on an AVX2-only CPU: no warning then.
  const CpuFeatures avx2_cpu = cpu_with({F::avx, F::avx2, F::fma, F::f16c});
  EXPECT_FALSE(mentions(performance_warnings(avx2_cpu, sys, plan_threads(sys, env_of({})), env), "OPENBLAS"));

  const SystemInfo numa = fixture("two_socket_numa");
  const auto numa_warnings = performance_warnings(avx2_cpu, numa, plan_threads(numa, env_of({})), env_of({}));
  EXPECT_TRUE(mentions(numa_warnings, "governor is 'powersave'"));
  EXPECT_TRUE(mentions(numa_warnings, "thermally throttled 3 times"));
  EXPECT_FALSE(mentions(numa_warnings, "cgroup"));
}

// ---------------------------------------------------------------------------------------------
// The thread count as a value: scopes, the process default, and parallel regions sized by them.

// The team size of a parallel_for sized by the calling thread's count.
int team_size_of_parallel_for() {
  std::atomic<int> team{0};
  parallel_for(64, 1, [&](std::size_t, std::size_t) { team.store(omp_get_num_threads()); });
  return team.load();
}

TEST(ThreadScope, SetsTheCountAndOpenMpsAndRestoresBoth) {
  const int outer = compute_threads();
  const int outer_openmp = omp_get_max_threads();
  {
    const ThreadScope one(1);
    EXPECT_EQ(compute_threads(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);  // what oneDNN sizes its work by
    EXPECT_EQ(team_size_of_parallel_for(), 1);
    {
      const ThreadScope three(3);
      EXPECT_EQ(compute_threads(), 3);
      EXPECT_EQ(omp_get_max_threads(), 3);
      EXPECT_EQ(team_size_of_parallel_for(), 3);
      const ThreadScope keep(0);  // 0: the count in effect
      EXPECT_EQ(compute_threads(), 3);
    }
    EXPECT_EQ(compute_threads(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(compute_threads(), outer);
  EXPECT_EQ(omp_get_max_threads(), outer_openmp);
  EXPECT_THROW(ThreadScope(-1), UsageError);
  EXPECT_THROW(ThreadScope(5000), UsageError);
}

TEST(ThreadScope, EachThreadHasItsOwn) {
  // Both scopes are open at once; each thread's regions use its own count, not the last one set.
  std::barrier both_open(2);
  int seen[2] = {0, 0}, teams[2] = {0, 0};
  auto worker = [&](int index, int threads) {
    const ThreadScope scope(threads);
    both_open.arrive_and_wait();
    for (int round = 0; round < 20; ++round) {
      seen[index] = compute_threads();
      teams[index] = std::max(teams[index], team_size_of_parallel_for());
    }
  };
  std::thread a(worker, 0, 1), b(worker, 1, 3);
  a.join();
  b.join();
  EXPECT_EQ(seen[0], 1);
  EXPECT_EQ(teams[0], 1);
  EXPECT_EQ(seen[1], 3);
  EXPECT_EQ(teams[1], 3);
}

TEST(ThreadScope, ProcessDefaultReachesNewThreadsAndIsChecked) {
  EXPECT_THROW(set_default_threads(0), UsageError);
  EXPECT_THROW(set_default_threads(4097), UsageError);
  EXPECT_THROW(check_thread_request(0, "--threads"), UsageError);
  const int before = compute_threads();
  set_default_threads(3);
  int on_new_thread = 0, team = 0;
  std::thread([&] {
    on_new_thread = compute_threads();
    team = team_size_of_parallel_for();
  }).join();
  EXPECT_EQ(on_new_thread, 3);
  EXPECT_EQ(team, 3);
  EXPECT_EQ(compute_threads(), 3);
  set_default_threads(before);
}

}  // namespace
}  // namespace cpudl
