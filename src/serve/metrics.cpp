// Prometheus text exposition (metrics.h).
#include "serve/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl::serve {

namespace {

// Label values escape backslash, double quote and line feed; HELP text backslash and line feed.
std::string escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quote)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  for (int digits = 6; digits <= 17; ++digits) {  // the shortest text that reads back as v
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  return buffer;
}

std::string labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra = "") {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + escape(values[i], true) + "\"";
  if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
  return out.empty() ? "" : "{" + out + "}";
}

const char* type_name(Metrics::Type t) {
  switch (t) {
    case Metrics::Type::counter:
      return "counter";
    case Metrics::Type::histogram:
      return "histogram";
    case Metrics::Type::gauge:
      break;
  }
  return "gauge";
}

// /proc/self/stat fields 14 and 15 (utime, stime) in clock ticks; 22 (starttime) in ticks since boot.
std::vector<std::string> stat_fields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  return process_stat_fields(line);
}

}  // namespace

void Metrics::declare(const std::string& name, Type type, const std::string& help,
                      std::vector<std::string> label_names, std::vector<double> buckets) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (families_.count(name)) throw Error("metrics: " + name + " declared twice");
  Family f;
  f.type = type;
  f.help = help;
  f.label_names = std::move(label_names);
  f.buckets = std::move(buckets);
  families_.emplace(name, std::move(f));
  order_.push_back(name);
}

Metrics::Family& Metrics::family(const std::string& name, Type type) {
  const auto it = families_.find(name);
  if (it == families_.end() || it->second.type != type)
    throw Error("metrics: " + name + " is not a declared " + type_name(type));
  return it->second;
}

void Metrics::add(const std::string& name, double value, const std::vector<std::string>& label_values) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = families_.find(name);
  Family& f =
      family(name, it != families_.end() && it->second.type == Type::gauge ? Type::gauge : Type::counter);
  f.series[label_values].value += value;
}

void Metrics::set(const std::string& name, double value, const std::vector<std::string>& label_values) {
  const std::lock_guard<std::mutex> lock(mutex_);
  family(name, Type::gauge).series[label_values].value = value;
}

void Metrics::observe(const std::string& name, double value, const std::vector<std::string>& label_values) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Family& f = family(name, Type::histogram);
  Series& s = f.series[label_values];
  if (s.bucket_counts.empty()) s.bucket_counts.assign(f.buckets.size(), 0);
  for (std::size_t b = 0; b < f.buckets.size(); ++b)
    if (value <= f.buckets[b]) {
      ++s.bucket_counts[b];
      break;
    }
  s.sum += value;
  ++s.count;
}

void Metrics::gauge_callback(const std::string& name, std::function<double()> read) {
  const std::lock_guard<std::mutex> lock(mutex_);
  family(name, Type::gauge).read = std::move(read);
}

double Metrics::value(const std::string& name, const std::vector<std::string>& label_values) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = families_.find(name);
  if (it == families_.end()) return 0;
  if (it->second.read) return it->second.read();
  const auto s = it->second.series.find(label_values);
  return s == it->second.series.end()
             ? 0
             : (it->second.type == Type::histogram ? s->second.count : s->second.value);
}

std::string Metrics::render() const {
  // Scrape-time values are read with the registry unlocked: their callbacks take the locks of
  // what they read (a model's queue), and a component that sets a metric while holding its own
  // lock would otherwise deadlock with a scrape -- LanguageModel::acquire, setting the busy slots
  // under its mutex while /metrics held this one and waited in LanguageModel::waiting, hung a
  // server for good.
  std::vector<std::pair<const std::string*, std::function<double()>>> reads;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& name : order_)
      if (const Family& f = families_.at(name); f.read) reads.emplace_back(&name, f.read);
  }
  std::map<std::string, double> read_values;
  for (const auto& [name, read] : reads) read_values[*name] = read();
  const std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    out +=
        "# HELP " + name + " " + escape(f.help, false) + "\n# TYPE " + name + " " + type_name(f.type) + "\n";
    if (f.read) {
      out += name + " " + number(read_values.at(name)) + "\n";
      continue;
    }
    for (const auto& [values, s] : f.series) {
      if (f.type != Type::histogram) {
        out += name + labels(f.label_names, values) + " " + number(s.value) + "\n";
        continue;
      }
      double cumulative = 0;
      for (std::size_t b = 0; b < f.buckets.size(); ++b) {
        cumulative += s.bucket_counts[b];
        out += name + "_bucket" + labels(f.label_names, values, "le=\"" + number(f.buckets[b]) + "\"") + " " +
               number(cumulative) + "\n";
      }
      out += name + "_bucket" + labels(f.label_names, values, "le=\"+Inf\"") + " " + number(s.count) + "\n";
      out += name + "_sum" + labels(f.label_names, values) + " " + number(s.sum) + "\n";
      out += name + "_count" + labels(f.label_names, values) + " " + number(s.count) + "\n";
    }
  }
  return out;
}

void Metrics::declare_process_metrics() {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  declare("process_resident_memory_bytes", Type::gauge, "Resident memory size in bytes.");
  gauge_callback("process_resident_memory_bytes", [page] {
    std::ifstream in("/proc/self/statm");
    double size = 0, resident = 0;
    in >> size >> resident;
    return resident * page;
  });
  declare("process_cpu_seconds_total", Type::counter, "Total user and system CPU time spent in seconds.");
  // A counter read at scrape time: rendered through the same callback path as gauges.
  families_.at("process_cpu_seconds_total").read = [ticks] {
    const auto f = stat_fields();
    return f.size() > 15 ? (std::stod(f[13]) + std::stod(f[14])) / ticks : 0.0;
  };
  declare("process_open_fds", Type::gauge, "Number of open file descriptors.");
  gauge_callback("process_open_fds", [] {
    double n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
      closedir(d);
      n -= 1;  // the descriptor opendir itself holds
    }
    return n;
  });
  declare("process_start_time_seconds", Type::gauge,
          "Start time of the process since unix epoch in seconds.");
  const double start = [ticks] {
    std::ifstream in("/proc/stat");
    double boot = 0;
    for (std::string key; in >> key;)
      if (key == "btime") {
        in >> boot;
        break;
      }
    const auto f = stat_fields();
    return f.size() > 21 ? boot + std::stod(f[21]) / ticks : 0.0;
  }();
  set("process_start_time_seconds", start);
}

void declare_governor_metrics(Metrics& metrics) {
  using T = Metrics::Type;
  metrics.declare("cpudl_governor_threads", T::gauge, "Compute threads the governor allows now.");
  metrics.declare("cpudl_governor_paused", T::gauge,
                  "1 while the governor pauses work at a critical temperature.");
  metrics.declare("cpudl_governor_decisions_total", T::counter, "Thread-count changes and pauses, by reason.",
                  {"reason"});
  metrics.declare("cpudl_cpu_pressure_ratio", T::gauge,
                  "Share of the last second some task waited for a CPU (/proc/pressure/cpu).");
  metrics.declare("cpudl_cpu_steal_ratio", T::gauge,
                  "Share of the compute CPUs' last second the hypervisor took.");
  metrics.declare("cpudl_cpu_throttled_seconds_total", T::counter,
                  "Time the cgroup's CPU quota held this process back since it started.");
  metrics.declare("cpudl_temperature_celsius", T::gauge, "Temperature per thermal zone or hwmon sensor.",
                  {"zone"});
}

void record_governor_status(Metrics& metrics, const GovernorStatus& status) {
  // Counters kept by the governor: advanced to its totals (one writer, the governor's thread).
  const auto advance = [&](const std::string& name, double total, const std::vector<std::string>& labels) {
    const double now = metrics.value(name, labels);
    if (total > now) metrics.add(name, total - now, labels);
  };
  metrics.set("cpudl_governor_threads", status.threads);
  metrics.set("cpudl_governor_paused", status.paused ? 1 : 0);
  for (const auto& [reason, count] : status.decisions)
    advance("cpudl_governor_decisions_total", static_cast<double>(count), {reason});
  if (status.pressure_ratio) metrics.set("cpudl_cpu_pressure_ratio", *status.pressure_ratio);
  if (status.steal_ratio) metrics.set("cpudl_cpu_steal_ratio", *status.steal_ratio);
  advance("cpudl_cpu_throttled_seconds_total", status.throttled_seconds, {});
  for (const Temperature& t : status.temperatures)
    metrics.set("cpudl_temperature_celsius", t.celsius, {t.zone});
}

}  // namespace cpudl::serve
