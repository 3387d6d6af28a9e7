// Machine topology, memory and limits from sysfs and procfs. Every path is read under a root so
// that tests can point it at fixture trees; whatever cannot be read is reported as unknown.
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "runtime/cgroup.h"
#include "runtime/read_text.h"

namespace cpudl {
namespace fs = std::filesystem;

namespace {

template <class T>
std::optional<T> parse_number(std::string_view s) {
  s = trim(s);
  T value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

template <class T>
std::optional<T> read_number(const fs::path& path) {
  const auto text = read_text(path);
  return text ? parse_number<T>(*text) : std::nullopt;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const auto pos = s.find(sep);
    parts.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) break;
    s.remove_prefix(pos + 1);
  }
  return parts;
}

// "/sys/fs/cgroup" under root; mount points in mountinfo are absolute.
fs::path under(const fs::path& root, std::string_view absolute) {
  return root / fs::path(std::string(absolute)).relative_path();
}

// Value of "Key:   123 kB" in a meminfo-style file, in bytes.
std::optional<std::uint64_t> meminfo_bytes(const std::string& text, std::string_view key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string_view name = trim(std::string_view(line).substr(0, colon));
    // Per-node meminfo prefixes "Node 0 ": compare the last word only.
    if (const auto space = name.rfind(' '); space != std::string_view::npos) name.remove_prefix(space + 1);
    if (name != key) continue;
    std::istringstream fields(line.substr(colon + 1));
    std::uint64_t value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

struct CgroupMount {
  std::string root;        // root of the mounted hierarchy (field 4 of mountinfo)
  std::string mountpoint;  // where it is mounted (field 5)
};

struct CgroupMounts {
  std::optional<CgroupMount> v2;
  std::map<std::string, CgroupMount> v1;  // controller -> mount
};

CgroupMounts read_cgroup_mounts(const fs::path& root) {
  CgroupMounts mounts;
  const auto text = read_text(root / "proc/self/mountinfo");
  if (!text) return mounts;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
    std::string id, parent, device, mount_root, mountpoint, fstype, source, super_options;
    if (!(pre >> id >> parent >> device >> mount_root >> mountpoint)) continue;
    if (!(post >> fstype >> source >> super_options)) continue;
    if (fstype == "cgroup2") {
      mounts.v2 = CgroupMount{mount_root, mountpoint};
    } else if (fstype == "cgroup") {
      for (std::string_view option : split(super_options, ','))
        mounts.v1.emplace(std::string(option), CgroupMount{mount_root, mountpoint});
    }
  }
  return mounts;
}

// cgroup path of this process per controller ("" key for the v2 unified hierarchy).
std::map<std::string, std::string> read_process_cgroups(const fs::path& root) {
  std::map<std::string, std::string> paths;
  const auto text = read_text(root / "proc/self/cgroup");
  if (!text) return paths;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) paths[""] = path;
    for (std::string_view c : split(controllers, ','))
      if (!c.empty()) paths[std::string(c)] = path;
  }
  return paths;
}

// Directories from this process's cgroup up to the mount point: a limit anywhere on the way
// applies, so callers take the tightest.
std::vector<fs::path> cgroup_chain(const fs::path& root, const CgroupMount& mount,
                                   const std::string& process_path) {
  std::string relative;
  if (process_path.rfind(mount.root, 0) == 0) relative = process_path.substr(mount.root.size());
  const fs::path top = under(root, mount.mountpoint);
  std::vector<fs::path> chain;
  const fs::path rel = fs::path(relative).lexically_normal().relative_path();
  fs::path dir = top;
  for (const fs::path& part : rel)
    if (!part.empty() && part != ".") dir /= part;
  while (true) {
    chain.push_back(dir);
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
    if (dir.native().size() < top.native().size()) break;
  }
  return chain;
}

}  // namespace

CgroupCpuDirs cgroup_cpu_dirs(const fs::path& root) {
  const CgroupMounts mounts = read_cgroup_mounts(root);
  const auto paths = read_process_cgroups(root);
  CgroupCpuDirs found;
  if (mounts.v2 && paths.count("")) {
    found.dirs = cgroup_chain(root, *mounts.v2, paths.at(""));
    for (const fs::path& dir : found.dirs)
      if (fs::exists(dir / "cpu.max")) found.version = "v2";  // the cpu controller is enabled here
    if (!found.version.empty()) return found;
  }
  if (mounts.v1.count("cpu") && paths.count("cpu")) {
    found.dirs = cgroup_chain(root, mounts.v1.at("cpu"), paths.at("cpu"));
    found.version = "v1";
    return found;
  }
  return {};
}

namespace {

void read_cgroup_limits(const fs::path& root, SystemInfo& info) {
  const CgroupMounts mounts = read_cgroup_mounts(root);
  const auto paths = read_process_cgroups(root);
  info.cgroup_cpu.version = "none";

  // cgroup v2: cpu.max = "max 100000" or "150000 100000"; memory.max = "max" or bytes.
  if (mounts.v2 && paths.count("")) {
    bool found_cpu = false;
    for (const fs::path& dir : cgroup_chain(root, *mounts.v2, paths.at(""))) {
      if (const auto text = read_text(dir / "cpu.max")) {
        found_cpu = true;
        std::istringstream fields(*text);
        std::string quota, period;
        fields >> quota >> period;
        const auto q = parse_number<double>(quota);
        const auto p = parse_number<double>(period);
        if (q && p && *p > 0 && (!info.cgroup_cpu.cpus || *q / *p < *info.cgroup_cpu.cpus)) {
          info.cgroup_cpu.cpus = *q / *p;
          info.cgroup_cpu.path = (dir / "cpu.max").string();
        }
      }
      if (const auto limit = read_number<std::uint64_t>(dir / "memory.max"))
        if (!info.cgroup_memory_limit_bytes || *limit < *info.cgroup_memory_limit_bytes)
          info.cgroup_memory_limit_bytes = limit;
    }
    if (found_cpu) info.cgroup_cpu.version = "v2";
  }

  // cgroup v1 (also the hybrid layout, where the unified hierarchy holds no cpu controller).
  if (info.cgroup_cpu.version == "none" && mounts.v1.count("cpu") && paths.count("cpu")) {
    for (const fs::path& dir : cgroup_chain(root, mounts.v1.at("cpu"), paths.at("cpu"))) {
      const auto quota = read_number<std::int64_t>(dir / "cpu.cfs_quota_us");
      const auto period = read_number<std::int64_t>(dir / "cpu.cfs_period_us");
      if (!quota || !period) continue;
      info.cgroup_cpu.version = "v1";
      if (info.cgroup_cpu.path.empty()) info.cgroup_cpu.path = (dir / "cpu.cfs_quota_us").string();
      if (*quota > 0 && *period > 0) {
        const double cpus = static_cast<double>(*quota) / static_cast<double>(*period);
        if (!info.cgroup_cpu.cpus || cpus < *info.cgroup_cpu.cpus) {
          info.cgroup_cpu.cpus = cpus;
          info.cgroup_cpu.path = (dir / "cpu.cfs_quota_us").string();
        }
      }
    }
  }
  if (!info.cgroup_memory_limit_bytes && mounts.v1.count("memory") && paths.count("memory")) {
    for (const fs::path& dir : cgroup_chain(root, mounts.v1.at("memory"), paths.at("memory"))) {
      const auto limit = read_number<std::uint64_t>(dir / "memory.limit_in_bytes");
      // v1 reports "no limit" as a huge page-aligned number near 2^63.
      if (limit && *limit < (std::uint64_t{1} << 60) &&
          (!info.cgroup_memory_limit_bytes || *limit < *info.cgroup_memory_limit_bytes))
        info.cgroup_memory_limit_bytes = limit;
    }
  }
}

void read_topology(const fs::path& root, SystemInfo& info) {
  const fs::path cpu_dir = root / "sys/devices/system/cpu";
  if (const auto online = read_text(cpu_dir / "online")) {
    try {
      info.online_cpus = parse_cpu_list(*online);
    } catch (const Error&) {
      info.online_cpus.clear();
    }
  }
  if (info.online_cpus.empty()) {  // no "online" file: every cpuN directory counts
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(cpu_dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 3 && name.rfind("cpu", 0) == 0)
        if (const auto id = parse_number<int>(std::string_view(name).substr(3)))
          info.online_cpus.push_back(*id);
    }
    std::sort(info.online_cpus.begin(), info.online_cpus.end());
  }

  std::set<std::pair<int, int>> cores;
  std::set<int> packages;
  std::map<int, int> core_of_cpu;  // cpu -> index into `cores`, for usable_physical_cores
  std::map<std::pair<int, int>, int> core_ids;
  bool topology_complete = !info.online_cpus.empty();
  std::uint64_t throttle = 0;
  bool throttle_known = false;
  for (int cpu : info.online_cpus) {
    const fs::path topology = cpu_dir / ("cpu" + std::to_string(cpu)) / "topology";
    const auto package = read_number<int>(topology / "physical_package_id");
    const auto core = read_number<int>(topology / "core_id");
    if (!package || !core) {
      topology_complete = false;
      continue;
    }
    packages.insert(*package);
    const auto key = std::make_pair(*package, *core);
    cores.insert(key);
    core_ids.emplace(key, static_cast<int>(core_ids.size()));
    core_of_cpu[cpu] = core_ids.at(key);

    const fs::path thermal = cpu_dir / ("cpu" + std::to_string(cpu)) / "thermal_throttle";
    if (const auto count = read_number<std::uint64_t>(thermal / "core_throttle_count")) {
      throttle += *count;
      throttle_known = true;
    }
  }
  if (topology_complete) {
    info.physical_cores = static_cast<int>(cores.size());
    info.sockets = static_cast<int>(packages.size());
    std::map<std::pair<int, int>, std::vector<int>> cpus_of_core;  // ordered by (package, core)
    for (const auto& [cpu, index] : core_of_cpu)
      for (const auto& [key, id] : core_ids)
        if (id == index) cpus_of_core[key].push_back(cpu);
    for (auto& [key, cpus] : cpus_of_core) info.core_cpus.push_back(cpus);
  }
  if (throttle_known) info.thermal_throttle_events = throttle;

  // Cache sizes as the first online CPU sees them (per instance).
  const int first_cpu = info.online_cpus.empty() ? 0 : info.online_cpus.front();
  const fs::path cache_dir = cpu_dir / ("cpu" + std::to_string(first_cpu)) / "cache";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache_dir, ec)) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    const auto level = read_number<int>(entry.path() / "level");
    const auto type = read_text(entry.path() / "type");
    const auto size_text = read_text(entry.path() / "size");
    if (!level || !type || !size_text) continue;
    const auto size = parse_cache_size(*size_text);
    const std::string_view kind = trim(*type);
    if (*level == 1 && kind == "Data") info.l1d_bytes = size;
    if (*level == 2 && kind != "Instruction") info.l2_bytes = size;
    if (*level == 3 && kind != "Instruction") info.l3_bytes = size;
  }

  if (const auto governor =
          read_text(cpu_dir / ("cpu" + std::to_string(first_cpu)) / "cpufreq/scaling_governor"))
    info.frequency_governor = std::string(trim(*governor));

  // Affinity: the allowed list of this process (what sched_getaffinity returns).
  if (const auto status = read_text(root / "proc/self/status")) {
    std::istringstream lines(*status);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
      try {
        info.affinity = parse_cpu_list(line.substr(line.find(':') + 1));
      } catch (const Error&) {
        info.affinity.clear();
      }
    }
  }
  if (topology_complete && !info.affinity.empty()) {
    std::set<int> allowed_cores;
    for (int cpu : info.affinity)
      if (core_of_cpu.count(cpu)) allowed_cores.insert(core_of_cpu.at(cpu));
    info.usable_physical_cores = static_cast<int>(allowed_cores.size());
  } else if (topology_complete) {
    info.usable_physical_cores = info.physical_cores;
  }
}

void read_numa(const fs::path& root, SystemInfo& info) {
  const fs::path node_dir = root / "sys/devices/system/node";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 4 || name.rfind("node", 0) != 0) continue;
    const auto id = parse_number<int>(std::string_view(name).substr(4));
    if (!id) continue;
    NumaNode node;
    node.id = *id;
    if (const auto cpus = read_text(entry.path() / "cpulist")) {
      try {
        node.cpus = parse_cpu_list(*cpus);
      } catch (const Error&) {
      }
    }
    if (const auto meminfo = read_text(entry.path() / "meminfo"))
      node.memory_bytes = meminfo_bytes(*meminfo, "MemTotal");
    info.numa_nodes.push_back(std::move(node));
  }
  std::sort(info.numa_nodes.begin(), info.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  text = trim(text);
  if (text.empty()) return cpus;
  for (std::string_view part : split(text, ',')) {
    part = trim(part);
    const auto dash = part.find('-');
    const auto first = parse_number<int>(part.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : parse_number<int>(part.substr(dash + 1));
    if (!first || !last || *first < 0 || *last < *first || *last > 1 << 20)
      throw Error("malformed CPU list '" + std::string(text) + "' (expected e.g. 0-3,8)");
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::optional<std::uint64_t> parse_cache_size(std::string_view text) {
  text = trim(text);
  std::uint64_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
        multiplier = std::uint64_t{1} << 10;
        break;
      case 'M':
        multiplier = std::uint64_t{1} << 20;
        break;
      case 'G':
        multiplier = std::uint64_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  const auto value = parse_number<std::uint64_t>(text);
  if (!value || *value == 0) return std::nullopt;
  return *value * multiplier;
}

SystemInfo read_system_info(const fs::path& root) {
  SystemInfo info;
  read_topology(root, info);
  read_numa(root, info);
  if (const auto meminfo = read_text(root / "proc/meminfo")) {
    info.mem_total_bytes = meminfo_bytes(*meminfo, "MemTotal");
    info.mem_available_bytes = meminfo_bytes(*meminfo, "MemAvailable");
  }
  read_cgroup_limits(root, info);
  return info;
}

std::int64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace cpudl
