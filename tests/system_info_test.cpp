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

}  // namespace
}  // namespace cpudl
