// CPUID/XGETBV detection against Linux's own view, and the ISA level rules.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  const auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  const CpuFeatures cpu = probe_cpu_features();
  for (int f = 0; f < kCpuFeatureCount; ++f) {
    const std::string name(cpu_feature_name(static_cast<CpuFeature>(f)));
    // The kernel hides features whose register state it does not enable, so compare "usable".
    EXPECT_EQ(cpu.usable[f], flags.count(name) == 1) << name;
  }
  EXPECT_FALSE(cpu.vendor.empty());
  EXPECT_GT(cpu.family, 0);
  EXPECT_EQ(!cpu.hypervisor.empty(), flags.count("hypervisor") == 1);
}

TEST(CpuFeatures, UsableImpliesAdvertisedAndOsState) {
  const CpuFeatures cpu = probe_cpu_features();
  for (int f = 0; f < kCpuFeatureCount; ++f) {
    if (cpu.usable[f]) {
      EXPECT_TRUE(cpu.cpuid[f]) << cpu_feature_name(static_cast<CpuFeature>(f));
    }
  }
  EXPECT_TRUE(!cpu.has(CpuFeature::avx512f) || cpu.os.avx512);
  EXPECT_TRUE(!cpu.has(CpuFeature::avx2) || cpu.os.avx);
  EXPECT_TRUE(!cpu.has(CpuFeature::amx_tile) || cpu.os.amx_permission);
}

CpuFeatures cpu_with_levels_up_to(IsaLevel top) {
  CpuFeatures cpu;
  for (int l = 0; l <= static_cast<int>(top); ++l)
    for (CpuFeature f : isa_level_features(static_cast<IsaLevel>(l)))
      cpu.cpuid[static_cast<int>(f)] = cpu.usable[static_cast<int>(f)] = true;
  return cpu;
}

TEST(IsaLevel, NamesRoundTrip) {
  for (int l = 0; l < kIsaLevelCount; ++l) {
    const auto level = static_cast<IsaLevel>(l);
    EXPECT_EQ(parse_isa_level(isa_level_name(level)), level);
  }
  EXPECT_EQ(parse_isa_level("avx3"), std::nullopt);
}

TEST(IsaLevel, BestLevelNeedsEveryLowerLevel) {
  for (int l = 0; l < kIsaLevelCount; ++l)
    EXPECT_EQ(best_isa_level(cpu_with_levels_up_to(static_cast<IsaLevel>(l))), static_cast<IsaLevel>(l));
  // BF16 without VNNI (no such CPU, but the rule must hold): stops at avx512.
  CpuFeatures odd = cpu_with_levels_up_to(IsaLevel::avx512);
  odd.usable[static_cast<int>(CpuFeature::avx512_bf16)] = true;
  EXPECT_EQ(best_isa_level(odd), IsaLevel::avx512);
  // AVX-512 advertised but its state not enabled by the OS: avx2.
  CpuFeatures no_os = cpu_with_levels_up_to(IsaLevel::avx512_bf16);
  for (CpuFeature f : isa_level_features(IsaLevel::avx512)) no_os.usable[static_cast<int>(f)] = false;
  EXPECT_EQ(best_isa_level(no_os), IsaLevel::avx2);
  const IsaChoice choice = choose_isa_level(no_os, std::nullopt);
  EXPECT_NE(choice.reason.find("avx512f (state not enabled by the OS)"), std::string::npos) << choice.reason;
}

TEST(IsaLevel, CpudlIsaCapsButNeverExceeds) {
  const CpuFeatures zen3 = cpu_with_levels_up_to(IsaLevel::avx2);
  EXPECT_EQ(choose_isa_level(zen3, std::nullopt).active, IsaLevel::avx2);
  const IsaChoice capped = choose_isa_level(zen3, "generic");
  EXPECT_EQ(capped.active, IsaLevel::generic);
  EXPECT_EQ(capped.detected, IsaLevel::avx2);
  try {
    choose_isa_level(zen3, "avx512_bf16");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("avx512f"), std::string::npos) << message;
    EXPECT_NE(message.find("avx512_bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("best level here is avx2"), std::string::npos) << message;
  }
  EXPECT_THROW(choose_isa_level(zen3, "sse9"), UsageError);
  const CpuFeatures zen5 = cpu_with_levels_up_to(IsaLevel::avx512_bf16);
  EXPECT_EQ(choose_isa_level(zen5, std::nullopt).active, IsaLevel::avx512_bf16);
  EXPECT_EQ(choose_isa_level(zen5, "avx2").active, IsaLevel::avx2);
}

}  // namespace
}  // namespace cpudl
