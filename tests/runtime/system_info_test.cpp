// Topology, NUMA, memory and cgroup readers against fixture trees (tests/fixtures/<name>/).
#include <gtest/gtest.h>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl {
namespace {

SystemInfo fixture(const char* name) {
  return read_system_info(std::string(CPUDL_FIXTURES_DIR) + "/" + name);
}

TEST(ParseCpuList, RangesAndSingles) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_THROW(parse_cpu_list("3-1"), Error);
  EXPECT_THROW(parse_cpu_list("a-b"), Error);
  EXPECT_THROW(parse_cpu_list("1,,2"), Error);
}

TEST(ParseCacheSize, Units) {
  EXPECT_EQ(parse_cache_size("32K"), 32u << 10);
  EXPECT_EQ(parse_cache_size("32768K\n"), 32u << 20);
  EXPECT_EQ(parse_cache_size("2M"), 2u << 20);
  EXPECT_EQ(parse_cache_size("lotsK"), std::nullopt);
  EXPECT_EQ(parse_cache_size(""), std::nullopt);
}

TEST(SystemInfo, TwoSocketsTwoNumaNodesWithSmt) {
  const SystemInfo info = fixture("two_socket_numa");
  EXPECT_EQ(info.online_cpus.size(), 8u);
  EXPECT_EQ(info.physical_cores, 4);  // core_id repeats per package: SMT siblings
  EXPECT_EQ(info.sockets, 2);
  EXPECT_EQ(info.usable_physical_cores, 4);
  EXPECT_EQ(info.l1d_bytes, 48u << 10);
  EXPECT_EQ(info.l2_bytes, 2u << 20);
  EXPECT_EQ(info.l3_bytes, 105u << 20);
  ASSERT_EQ(info.numa_nodes.size(), 2u);
  EXPECT_EQ(info.numa_nodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(info.numa_nodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(info.numa_nodes[1].memory_bytes, std::uint64_t{16777216} * 1024);
  EXPECT_EQ(info.mem_total_bytes, std::uint64_t{33554432} * 1024);
  EXPECT_EQ(info.mem_available_bytes, std::uint64_t{30000000} * 1024);
  EXPECT_EQ(info.cgroup_cpu.version, "v2");
  EXPECT_EQ(info.cgroup_cpu.cpus, std::nullopt);  // "max": unlimited
  EXPECT_EQ(info.cgroup_memory_limit_bytes, std::nullopt);
  EXPECT_EQ(info.affinity.size(), 8u);
  EXPECT_EQ(info.frequency_governor, "powersave");
  EXPECT_EQ(info.thermal_throttle_events, 3u);
}

TEST(SystemInfo, CgroupV2FractionalQuotaAndMissingL3) {
  const SystemInfo info = fixture("cgroup_v2_quota");
  EXPECT_EQ(info.physical_cores, 4);
  EXPECT_EQ(info.l3_bytes, std::nullopt);
  EXPECT_EQ(info.l2_bytes, 1u << 20);
  EXPECT_EQ(info.cgroup_cpu.version, "v2");
  ASSERT_TRUE(info.cgroup_cpu.cpus.has_value());
  EXPECT_DOUBLE_EQ(*info.cgroup_cpu.cpus, 1.5);
  EXPECT_NE(info.cgroup_cpu.path.find("docker/abc123/cpu.max"), std::string::npos);
  EXPECT_EQ(info.cgroup_memory_limit_bytes, std::uint64_t{2} << 30);
  EXPECT_TRUE(info.numa_nodes.empty());  // no node directory: unknown
  EXPECT_EQ(info.frequency_governor, std::nullopt);
  EXPECT_EQ(info.thermal_throttle_events, std::nullopt);
}

TEST(SystemInfo, CgroupV1HybridQuotaOnAParentAndRestrictedAffinity) {
  const SystemInfo info = fixture("cgroup_v1_hybrid");
  EXPECT_EQ(info.cgroup_cpu.version, "v1");
  ASSERT_TRUE(info.cgroup_cpu.cpus.has_value());
  EXPECT_DOUBLE_EQ(*info.cgroup_cpu.cpus, 2.5);
  EXPECT_NE(info.cgroup_cpu.path.find("kubepods/cpu.cfs_quota_us"), std::string::npos);
  EXPECT_EQ(info.cgroup_memory_limit_bytes, std::uint64_t{4} << 30);
  EXPECT_EQ(info.affinity, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(info.physical_cores, 8);
  EXPECT_EQ(info.usable_physical_cores, 3);
}

TEST(SystemInfo, MalformedFilesAreUnknownNotFatal) {
  const SystemInfo info = fixture("malformed");
  EXPECT_EQ(info.physical_cores, std::nullopt);
  EXPECT_EQ(info.l1d_bytes, std::nullopt);
  EXPECT_EQ(info.mem_total_bytes, std::nullopt);
  EXPECT_TRUE(info.affinity.empty());
  EXPECT_EQ(info.cgroup_cpu.cpus, std::nullopt);
}

TEST(SystemInfo, MissingTreeIsAllUnknown) {
  const SystemInfo info = fixture("does-not-exist");
  EXPECT_TRUE(info.online_cpus.empty());
  EXPECT_EQ(info.physical_cores, std::nullopt);
  EXPECT_EQ(info.sockets, std::nullopt);
  EXPECT_EQ(info.l3_bytes, std::nullopt);
  EXPECT_TRUE(info.numa_nodes.empty());
  EXPECT_EQ(info.mem_total_bytes, std::nullopt);
  EXPECT_EQ(info.cgroup_cpu.version, "none");
  EXPECT_TRUE(info.affinity.empty());
}

TEST(SystemInfo, LiveMachineIsConsistent) {
  const SystemInfo info = read_system_info("/");
  ASSERT_FALSE(info.online_cpus.empty());
  ASSERT_TRUE(info.physical_cores.has_value());
  EXPECT_LE(*info.physical_cores, static_cast<int>(info.online_cpus.size()));
  EXPECT_FALSE(info.affinity.empty());
  ASSERT_TRUE(info.mem_total_bytes.has_value());
  EXPECT_GT(*info.mem_total_bytes, std::uint64_t{1} << 28);
}

// /proc/stat as a 2-vCPU KVM guest wrote it (trimmed): the aggregate line, then one per CPU.
constexpr const char* kGuestStat =
    "cpu  4256886 0 206285 7025454 5740 0 3352 123701 0 0\n"
    "cpu0 2126587 0 101842 3516207 3429 0 1616 61117 0 0\n"
    "cpu1 2130299 0 104443 3509247 2311 0 1735 62583 0 0\n"
    "intr 1 2 3\nctxt 12345\n";

TEST(CpuTimes, ParsesTheAggregateLineAndCountsCpus) {
  const auto t = parse_proc_stat(kGuestStat);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->steal, 123701u);
  EXPECT_EQ(t->total, 4256886u + 206285u + 7025454u + 5740u + 3352u + 123701u);
  EXPECT_EQ(t->cpus, 2);
  // A kernel older than 2.6.11 has no steal column; a line cut short is not a reading.
  EXPECT_EQ(parse_proc_stat("cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n"), std::nullopt);
  EXPECT_EQ(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n"), std::nullopt);
  EXPECT_EQ(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n"), std::nullopt);
  EXPECT_EQ(read_cpu_times(std::string(CPUDL_FIXTURES_DIR) + "/does-not-exist"), std::nullopt);
}

// /proc/<pid>/stat as the governor and the serve metrics read it: fields numbered as proc(5),
// the command name whole however many spaces and parentheses it holds.
TEST(ProcessStat, FieldsAreNumberedAfterACommandNameWithSpacesAndParentheses) {
  const auto f = process_stat_fields(
      "4242 (cpudl (serve) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 244 0 0 20 0 4 0 98765 1000 200\n");
  ASSERT_EQ(f.size(), 24u);
  EXPECT_EQ(f[0], "4242");
  EXPECT_EQ(f[1], "cpudl (serve) x");
  EXPECT_EQ(f[2], "S");
  EXPECT_EQ(f[13], "731");    // utime
  EXPECT_EQ(f[14], "244");    // stime
  EXPECT_EQ(f[21], "98765");  // starttime
  EXPECT_EQ(process_stat_fields("4242 cpudl S 1").size(), 2u) << "no ')': the pid and an empty name";
}

TEST(CpuTimes, StealShareIsOfTheBusyCpusTime) {
  const CpuTimes before{1000, 100, 2};
  // 200 ticks over 2 CPUs: one busy CPU had 100 of them, 25 stolen.
  EXPECT_DOUBLE_EQ(steal_share(before, {1200, 125, 2}, 1), 0.25);
  EXPECT_DOUBLE_EQ(steal_share(before, {1200, 125, 2}, 2), 0.125);
  EXPECT_DOUBLE_EQ(steal_share(before, {1200, 125, 2}, 8), 0.125);  // busy capped at the CPUs
  EXPECT_DOUBLE_EQ(steal_share(before, before, 1), 0.0);            // no tick passed
  EXPECT_DOUBLE_EQ(steal_share(before, {1100, 400, 2}, 1), 1.0);    // clamped
  EXPECT_DOUBLE_EQ(steal_share({1200, 125, 2}, before, 1), 0.0);    // readings swapped
}

TEST(CpuTimes, LiveMachineAdvances) {
  const auto a = read_cpu_times();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->cpus, static_cast<int>(read_system_info("/").online_cpus.size()));
  volatile double sink = 0;
  for (int i = 0; i < 30000000 && read_cpu_times()->total == a->total; ++i) sink = sink + 1.0;
  const auto b = read_cpu_times();
  ASSERT_TRUE(b.has_value());
  EXPECT_GT(b->total, a->total);
  EXPECT_GE(b->steal, a->steal);
  const double share = steal_share(*a, *b, 1);
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);
}

}  // namespace
}  // namespace cpudl
