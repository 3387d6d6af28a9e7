// CPU feature detection: CPUID says what the silicon has, XGETBV says what register state the OS
// saves, and Linux's arch_prctl grants AMX tile data. A feature is usable only when all agree.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "cpudl/runtime.h"

namespace cpudl {
namespace {

struct CpuidRegisters {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegisters cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegisters r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

// XGETBV is encoded by hand so this file needs no -mxsave (it stays portable x86-64).
std::uint64_t read_xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

// Linux refuses AMX tile data to a process that has not asked for it (since 5.16): the first
// tile instruction would fault. Ask once; a refusal means AMX is not usable.
bool request_amx_permission() {
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kArchGetXcompPerm = 0x1022;
  constexpr int kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask & (1UL << kXfeatureXtiledata)) != 0;
}

}  // namespace

std::string_view cpu_feature_name(CpuFeature feature) {
  static constexpr std::array<std::string_view, kCpuFeatureCount> kNames = {
#define CPUDL_FEATURE_NAME(name, ...) #name,
      CPUDL_CPU_FEATURES(CPUDL_FEATURE_NAME)
#undef CPUDL_FEATURE_NAME
  };
  const int i = static_cast<int>(feature);
  return i >= 0 && i < kCpuFeatureCount ? kNames[i] : "unknown";
}

CpuFeatures probe_cpu_features() {
  CpuFeatures out;
  const CpuidRegisters leaf0 = cpuid(0, 0);
  const unsigned max_leaf = leaf0.eax;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  out.vendor = vendor;

  const CpuidRegisters leaf1 = cpuid(1, 0);
  const unsigned base_family = (leaf1.eax >> 8) & 0xf;
  const unsigned base_model = (leaf1.eax >> 4) & 0xf;
  out.stepping = static_cast<int>(leaf1.eax & 0xf);
  out.family = static_cast<int>(base_family == 0xf ? base_family + ((leaf1.eax >> 20) & 0xff) : base_family);
  out.model = static_cast<int>((base_family == 0x6 || base_family == 0xf)
                                   ? (((leaf1.eax >> 16) & 0xf) << 4) | base_model
                                   : base_model);

  if (cpuid(0x80000000, 0).eax >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const CpuidRegisters r = cpuid(0x80000002 + i, 0);
      std::memcpy(brand + 16 * i + 0, &r.eax, 4);
      std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
      std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
      std::memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    out.model_name = trim(brand);
  }

  if ((leaf1.ecx >> 31) & 1) {  // "hypervisor present" bit; its vendor is at 0x40000000
    const CpuidRegisters h = cpuid(0x40000000, 0);
    char signature[13] = {};
    std::memcpy(signature + 0, &h.ebx, 4);
    std::memcpy(signature + 4, &h.ecx, 4);
    std::memcpy(signature + 8, &h.edx, 4);
    out.hypervisor = trim(signature);
    if (out.hypervisor.empty()) out.hypervisor = "unknown";
  }

  const CpuidRegisters leaf7 = max_leaf >= 7 ? cpuid(7, 0) : CpuidRegisters{};
  const CpuidRegisters leaf7_1 = (max_leaf >= 7 && leaf7.eax >= 1) ? cpuid(7, 1) : CpuidRegisters{};
  auto reg = [&](unsigned leaf, unsigned subleaf) -> const CpuidRegisters& {
    if (leaf == 1) return leaf1;
    return subleaf == 0 ? leaf7 : leaf7_1;
  };

  out.os.xsave = (leaf1.ecx >> 27) & 1;
  const std::uint64_t xcr0 = out.os.xsave ? read_xcr0() : 0;
  out.os.avx = (xcr0 & 0x6) == 0x6;
  out.os.avx512 = out.os.avx && (xcr0 & 0xe0) == 0xe0;
  out.os.amx = out.os.avx512 && (xcr0 & 0x60000) == 0x60000;

  int index = 0;
#define CPUDL_PROBE_FEATURE(name, leaf, subleaf, r, bit, state) \
  out.cpuid[index++] = (reg(leaf, subleaf).r >> (bit)) & 1;
  CPUDL_CPU_FEATURES(CPUDL_PROBE_FEATURE)
#undef CPUDL_PROBE_FEATURE

  const bool amx_advertised = out.cpuid[static_cast<int>(CpuFeature::amx_tile)];
  out.os.amx_permission = out.os.amx && amx_advertised && request_amx_permission();

  const bool state_ok[] = {/*sse*/ true, out.os.avx, out.os.avx512, out.os.amx && out.os.amx_permission};
  enum { sse, avx, avx512, amx };
  index = 0;
#define CPUDL_USABLE_FEATURE(name, leaf, subleaf, r, bit, state) \
  out.usable[index] = out.cpuid[index] && state_ok[state];       \
  ++index;
  CPUDL_CPU_FEATURES(CPUDL_USABLE_FEATURE)
#undef CPUDL_USABLE_FEATURE
  return out;
}

}  // namespace cpudl
