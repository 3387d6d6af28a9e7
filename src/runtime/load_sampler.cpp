// The governor's readings: the cgroup quota and throttling, CPU pressure (PSI), /proc/stat's idle
// and steal, temperatures (thermal zones, hwmon), frequencies and Intel's throttle counters. Every
// path is under a root so that tests feed fixture trees. Which files exist is found once; their
// values are read every sample.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "cpudl/error.h"
#include "runtime/cgroup.h"
#include "runtime/governor.h"
#include "runtime/read_text.h"

namespace cpudl {
namespace fs = std::filesystem;

namespace {

std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// "key value" lines (cpu.stat) or "key=value" fields on one line (PSI): the value of `key`.
std::optional<double> field(std::string_view text, std::string_view key, char separator) {
  std::size_t at = 0;
  while ((at = text.find(key, at)) != std::string_view::npos) {
    const bool starts = at == 0 || text[at - 1] == ' ' || text[at - 1] == '\n';
    const std::size_t after = at + key.size();
    if (starts && after < text.size() && text[after] == separator) {
      std::string_view rest = text.substr(after + 1);
      rest = rest.substr(0, rest.find_first_of(" \n"));
      return parse_double(rest);
    }
    at = after;
  }
  return std::nullopt;
}

std::vector<fs::path> entries_starting(const fs::path& dir, std::string_view prefix) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

LoadSampler::LoadSampler(fs::path root, std::function<void(const std::string&)> warn)
    : root_(std::move(root)), warn_(std::move(warn)) {
  const CgroupCpuDirs cgroup = cgroup_cpu_dirs(root_);
  cgroup_dirs_ = cgroup.dirs;
  cgroup_version_ = cgroup.version;
  for (const fs::path& zone : entries_starting(root_ / "sys/class/thermal", "thermal_zone")) {
    if (!fs::exists(zone / "temp")) continue;
    Sensor sensor;
    const auto type = text(zone / "type");
    sensor.zone = zone.filename().string() + (type ? " (" + std::string(trim(*type)) + ")" : "");
    sensor.temperature = zone / "temp";
    for (const fs::path& trip : entries_starting(zone, "trip_point_")) {
      const std::string name = trip.filename().string();
      if (name.size() < 5 || name.compare(name.size() - 5, 5, "_type") != 0) continue;
      const auto kind = text(trip);
      if (kind && trim(*kind) == "critical")
        sensor.critical = zone / (name.substr(0, name.size() - 5) + "_temp");
    }
    sensors_.push_back(sensor);
  }
  for (const fs::path& hwmon : entries_starting(root_ / "sys/class/hwmon", "hwmon"))
    for (const fs::path& input : entries_starting(hwmon, "temp")) {
      const std::string name = input.filename().string();
      if (name.size() <= 6 || name.compare(name.size() - 6, 6, "_input") != 0) continue;
      const std::string base = name.substr(0, name.size() - 6);
      const auto chip = text(hwmon / "name");
      const auto label = text(hwmon / (base + "_label"));
      Sensor sensor;
      sensor.zone = (chip ? std::string(trim(*chip)) : hwmon.filename().string()) + " " +
                    (label ? std::string(trim(*label)) : base);
      sensor.temperature = input;
      if (fs::exists(hwmon / (base + "_crit"))) sensor.critical = hwmon / (base + "_crit");
      sensors_.push_back(sensor);
    }
  // Frequencies and throttle counters of at most 16 CPUs spread over the machine: enough to see a
  // package slow down, without reading a thousand files a second on a large server.
  std::vector<fs::path> cpus;
  for (const fs::path& dir : entries_starting(root_ / "sys/devices/system/cpu", "cpu")) {
    const std::string name = dir.filename().string();
    if (name.size() > 3 &&
        std::all_of(name.begin() + 3, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      cpus.push_back(dir);
  }
  const std::size_t step = std::max<std::size_t>(1, (cpus.size() + 15) / 16);
  for (std::size_t i = 0; i < cpus.size(); i += step) cpu_dirs_.push_back(cpus[i]);
}

void LoadSampler::malformed(const fs::path& path, const std::string& what) {
  if (warned_.insert(path.string()).second && warn_)
    warn_("governor: cannot read " + path.string() + " (" + what + "); keeping its last good reading");
}

std::optional<std::string> LoadSampler::text(const fs::path& path) { return read_text(path); }

std::optional<double> LoadSampler::number(const fs::path& path, double scale) {
  const auto content = read_text(path);
  if (!content) return std::nullopt;  // absent: this machine does not have it
  const std::string key = path.string();
  if (const auto value = parse_double(*content)) {
    last_good_[key] = *value * scale;
    return *value * scale;
  }
  malformed(path, "expected a number, found \"" + std::string(trim(*content).substr(0, 40)) + "\"");
  const auto last = last_good_.find(key);
  return last == last_good_.end() ? std::nullopt : std::optional<double>(last->second);
}

LoadSample LoadSampler::sample(double seconds, bool own) {
  LoadSample s;
  s.seconds = seconds;
  if (own) {
    // "pid (comm) S ...": the state is the first field after the command's closing parenthesis.
    int running = 0;
    std::error_code ec;
    for (const auto& task : fs::directory_iterator(root_ / "proc/self/task", ec)) {
      const auto stat = text(task.path() / "stat");
      const auto close = stat ? stat->rfind(')') : std::string::npos;
      if (close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] == 'R') ++running;
    }
    if (!ec) s.own_runnable = std::max(1, running);  // the thread that looks is running
  }

  if (const auto status = text(root_ / "proc/self/status")) {
    const auto at = status->find("Cpus_allowed_list:");
    if (at != std::string::npos) {
      const std::size_t begin = at + 18, end = status->find('\n', begin);
      try {
        s.affinity_cpus = static_cast<int>(parse_cpu_list(trim(status->substr(begin, end - begin))).size());
      } catch (const Error&) {
        malformed(root_ / "proc/self/status", "Cpus_allowed_list is not a CPU list");
      }
    }
  }

  // The tightest quota on the way up; the throttling counters of the cgroup that holds it (a
  // v1 quota throttles the group that sets it), else the process's own.
  fs::path stat_dir = cgroup_dirs_.empty() ? fs::path() : cgroup_dirs_.front();
  for (const fs::path& dir : cgroup_dirs_) {
    std::optional<double> cpus;
    if (cgroup_version_ == "v2") {
      if (const auto max = text(dir / "cpu.max")) {
        std::istringstream fields(*max);
        std::string quota, period;
        fields >> quota >> period;
        const auto q = parse_double(quota), p = parse_double(period);
        if (quota != "max" && (!q || !p || *p <= 0))
          malformed(dir / "cpu.max", "expected \"max PERIOD\" or \"QUOTA PERIOD\"");
        else if (q && p)
          cpus = *q / *p;
      }
    } else {
      const auto q = number(dir / "cpu.cfs_quota_us"), p = number(dir / "cpu.cfs_period_us");
      if (q && p && *q > 0 && *p > 0) cpus = *q / *p;
    }
    if (cpus && (!s.quota_cpus || *cpus < *s.quota_cpus)) {
      s.quota_cpus = cpus;
      stat_dir = dir;
    }
  }
  if (!stat_dir.empty()) {
    if (const auto stat = text(stat_dir / "cpu.stat")) {
      const auto periods = field(*stat, "nr_periods", ' ');
      const auto throttled = field(*stat, "nr_throttled", ' ');
      const auto time = cgroup_version_ == "v2" ? field(*stat, "throttled_usec", ' ')
                                                : field(*stat, "throttled_time", ' ');  // ns
      // Without a quota anywhere, v2's cpu.stat has no throttling lines: nothing to read then.
      if (periods && throttled && time) {
        s.cgroup_periods = static_cast<std::uint64_t>(*periods);
        s.cgroup_throttled_periods = static_cast<std::uint64_t>(*throttled);
        s.cgroup_throttled_us = cgroup_version_ == "v2" ? *time : *time / 1000.0;
      }
    }
  }

  if (const auto psi = text(root_ / "proc/pressure/cpu")) {
    const auto line_end = psi->find('\n');
    const std::string some = psi->substr(0, line_end);
    const auto total = some.rfind("some", 0) == 0 ? field(some, "total", '=') : std::nullopt;
    if (total) {
      s.pressure_us = *total;
      last_good_["psi"] = *total;
    } else {
      malformed(root_ / "proc/pressure/cpu", "expected \"some ... total=N\"");
      if (last_good_.count("psi")) s.pressure_us = last_good_["psi"];
    }
  }

  if (const auto stat = text(root_ / "proc/stat")) {
    if (auto times = parse_proc_stat(*stat)) {
      last_cpu_times_ = times;
    } else {
      malformed(root_ / "proc/stat", "no \"cpu\" line with ten counters");
    }
    s.cpu_times = last_cpu_times_;
    const auto at = stat->find("\nprocs_running ");
    if (at != std::string::npos) {
      const std::size_t begin = at + 15;
      if (const auto n = parse_double(std::string_view(*stat).substr(begin, stat->find('\n', begin) - begin)))
        s.runnable = static_cast<int>(*n);
    }
  }
  // This process's CPU time: utime + stime.
  if (const auto stat = text(root_ / "proc/self/stat")) {
    std::optional<std::uint64_t> ticks;
    const std::vector<std::string> fields = process_stat_fields(*stat);
    const auto utime = fields.size() > 14 ? parse_double(fields[13]) : std::nullopt;
    const auto stime = fields.size() > 14 ? parse_double(fields[14]) : std::nullopt;
    if (utime && stime) ticks = static_cast<std::uint64_t>(*utime + *stime);
    if (ticks) {
      s.own_cpu_ticks = last_own_ticks_ = ticks;
    } else {
      malformed(root_ / "proc/self/stat", "expected utime and stime after the command name");
      s.own_cpu_ticks = last_own_ticks_;
    }
  }

  double ratio_sum = 0;
  int ratios = 0;
  std::optional<std::uint64_t> events;
  for (const fs::path& cpu : cpu_dirs_) {
    const auto current = number(cpu / "cpufreq/scaling_cur_freq");
    const auto maximum = number(cpu / "cpufreq/cpuinfo_max_freq");
    if (current && maximum && *maximum > 0) {
      ratio_sum += *current / *maximum;
      ++ratios;
    }
    for (const char* counter :
         {"thermal_throttle/core_throttle_count", "thermal_throttle/package_throttle_count"})
      if (const auto n = number(cpu / counter)) events = events.value_or(0) + static_cast<std::uint64_t>(*n);
  }
  if (ratios > 0) s.frequency_ratio = ratio_sum / ratios;
  s.thermal_throttle_events = events;

  for (const Sensor& sensor : sensors_) {
    const auto millidegrees = number(sensor.temperature);
    if (!millidegrees) continue;
    Temperature t;
    t.zone = sensor.zone;
    t.celsius = *millidegrees / 1000.0;
    if (!sensor.critical.empty())
      if (const auto critical = number(sensor.critical)) t.critical = *critical / 1000.0;
    s.temperatures.push_back(t);
  }
  return s;
}

}  // namespace cpudl
