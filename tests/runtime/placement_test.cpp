// --bind cores: the placement planned on fixture topologies (two NUMA nodes with SMT, a narrowed
// affinity mask), and the pinning itself on this machine.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include "cpudl/runtime.h"

namespace cpudl {
namespace {

SystemInfo fixture(const char* name) {
  return read_system_info(std::string(CPUDL_FIXTURES_DIR) + "/" + name);
}

TEST(Placement, OneCoreEachNodeByNodeThenTheSiblings) {
  // Two packages of two cores with two hardware threads each; node 0 holds CPUs 0-3.
  const SystemInfo s = fixture("two_socket_numa");
  ASSERT_EQ(s.core_cpus, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  const Placement two = plan_placement(s, 2);
  EXPECT_EQ(two.cpus, (std::vector<int>{0, 1})) << "both on node 0: one node's memory and cache";
  EXPECT_EQ(two.nodes, (std::vector<int>{0, 0}));
  EXPECT_EQ(two.text, "node 0: threads 0-1 on CPUs 0-1");
  const Placement four = plan_placement(s, 4);
  EXPECT_EQ(four.cpus, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(four.nodes, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(four.text, "node 0: threads 0-1 on CPUs 0-1; node 1: threads 2-3 on CPUs 4-5");
  const Placement six = plan_placement(s, 6);  // every core has one before any sibling gets one
  EXPECT_EQ(six.cpus, (std::vector<int>{0, 1, 4, 5, 2, 3}));
}

TEST(Placement, StaysInsideTheAffinityMask) {
  const SystemInfo s = fixture("cgroup_v1_hybrid");  // CPUs 0, 2 and 4 allowed
  const Placement p = plan_placement(s, 3);
  for (int cpu : p.cpus) EXPECT_TRUE(cpu == 0 || cpu == 2 || cpu == 4) << cpu;
  std::vector<int> sorted = p.cpus;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 2, 4}));
}

TEST(Placement, PinsThePoolOnThisMachine) {
  const SystemInfo s = read_system_info();
  const int threads = std::min(2, static_cast<int>(s.affinity.size()));
  if (threads < 2) GTEST_SKIP() << "one CPU allowed: nothing to pin apart";
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const Placement p = plan_placement(s, threads);
  const std::vector<int> where = bind_compute_threads(p, s);
  ASSERT_EQ(where.size(), 2u);
  EXPECT_EQ(where[1], p.cpus[1]) << "a worker runs on the CPU planned for it";
  // And stays there: each later region's worker reports the same CPU.
  std::vector<int> again(2, -1);
  {
    const ThreadScope scope(2);
#pragma omp parallel num_threads(2)
    again[static_cast<std::size_t>(omp_get_thread_num())] = sched_getcpu();
  }
  EXPECT_EQ(again[1], p.cpus[1]);
  // The calling thread is held to its node, not to one CPU.
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  EXPECT_GE(CPU_COUNT(&mine), 1);
  // Leave the test process as it was: every thread of the pool back on the full mask.
  const ThreadScope scope(2);
#pragma omp parallel num_threads(2)
  sched_setaffinity(0, sizeof before, &before);
}

}  // namespace
}  // namespace cpudl
