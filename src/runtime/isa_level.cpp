// ISA levels: which CPU features each kernel level needs, and which level this process runs at.
#include <array>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl {

namespace {
constexpr std::array<std::string_view, kIsaLevelCount> kLevelNames = {
#define CPUDL_LEVEL_NAME(name) #name,
    CPUDL_ISA_LEVELS(CPUDL_LEVEL_NAME)
#undef CPUDL_LEVEL_NAME
};

std::string join_missing(const CpuFeatures& cpu, IsaLevel up_to) {
  std::string missing;
  for (int l = 0; l <= static_cast<int>(up_to); ++l) {
    for (CpuFeature f : isa_level_features(static_cast<IsaLevel>(l))) {
      if (cpu.has(f)) continue;
      if (!missing.empty()) missing += ", ";
      missing += cpu_feature_name(f);
      if (cpu.cpuid[static_cast<int>(f)]) missing += " (state not enabled by the OS)";
    }
  }
  return missing;
}
}  // namespace

std::string_view isa_level_name(IsaLevel level) {
  const int i = static_cast<int>(level);
  return i >= 0 && i < kIsaLevelCount ? kLevelNames[i] : "unknown";
}

std::optional<IsaLevel> parse_isa_level(std::string_view name) {
  for (int i = 0; i < kIsaLevelCount; ++i)
    if (kLevelNames[i] == name) return static_cast<IsaLevel>(i);
  return std::nullopt;
}

std::vector<CpuFeature> isa_level_features(IsaLevel level) {
  using F = CpuFeature;
  switch (level) {
    case IsaLevel::generic:
      return {};
    case IsaLevel::avx2:
      return {F::avx, F::avx2, F::fma, F::f16c};
    case IsaLevel::avx512:
      return {F::avx512f, F::avx512cd, F::avx512bw, F::avx512dq, F::avx512vl};
    case IsaLevel::avx512_vnni:
      return {F::avx512_vnni};
    case IsaLevel::avx512_bf16:
      return {F::avx512_bf16};
    case IsaLevel::amx:
      return {F::amx_tile, F::amx_bf16, F::amx_int8};
  }
  return {};
}

IsaLevel best_isa_level(const CpuFeatures& cpu) {
  IsaLevel best = IsaLevel::generic;
  for (int l = 1; l < kIsaLevelCount; ++l) {
    for (CpuFeature f : isa_level_features(static_cast<IsaLevel>(l)))
      if (!cpu.has(f)) return best;
    best = static_cast<IsaLevel>(l);
  }
  return best;
}

IsaChoice choose_isa_level(const CpuFeatures& cpu, std::optional<std::string> requested) {
  IsaChoice choice;
  choice.detected = best_isa_level(cpu);
  choice.active = choice.detected;
  const std::string detected_name(isa_level_name(choice.detected));
  if (requested && !requested->empty()) {
    const auto level = parse_isa_level(*requested);
    if (!level) {
      std::string known;
      for (auto n : kLevelNames) known += (known.empty() ? "" : ", ") + std::string(n);
      throw UsageError("CPUDL_ISA=" + *requested + ": unknown level (expected one of " + known + ")");
    }
    if (*level > choice.detected)
      throw UsageError("CPUDL_ISA=" + *requested + ": this CPU cannot run it (missing " +
                       join_missing(cpu, *level) + "); the best level here is " + detected_name);
    choice.active = *level;
    choice.reason = "capped by CPUDL_ISA=" + *requested + " (the CPU supports " + detected_name + ")";
    return choice;
  }
  if (choice.detected == IsaLevel::amx) {
    choice.reason = "highest level whose features are all present";
  } else {
    const auto next = static_cast<IsaLevel>(static_cast<int>(choice.detected) + 1);
    std::string missing;
    for (CpuFeature f : isa_level_features(next)) {
      if (cpu.has(f)) continue;
      missing += (missing.empty() ? "" : ", ") + std::string(cpu_feature_name(f));
      if (cpu.cpuid[static_cast<int>(f)]) missing += " (state not enabled by the OS)";
    }
    choice.reason = "highest level whose features are all present; " + std::string(isa_level_name(next)) +
                    " needs " + missing;
  }
  return choice;
}

}  // namespace cpudl
