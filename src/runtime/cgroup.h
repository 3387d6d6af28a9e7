// The cgroup directories that hold this process's CPU controller, for readers that come back to
// them (the governor re-reads the quota and the throttling counters every second).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace cpudl {

struct CgroupCpuDirs {
  std::string version;                      // "v1", "v2", or "" when there is no CPU controller
  std::vector<std::filesystem::path> dirs;  // the process's cgroup first, then its parents
};
CgroupCpuDirs cgroup_cpu_dirs(const std::filesystem::path& root);

}  // namespace cpudl
