// perf_event_open counters per pool thread (perf_counters.h).
#include "runtime/perf_counters.h"

#include <linux/perf_event.h>
#include <omp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>

namespace cpudl {

namespace {

int open_event(std::uint32_t type, std::uint64_t config, int group) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = type;
  attr.config = config;
  attr.disabled = group == -1 ? 1 : 0;  // the leader starts the group
  attr.exclude_kernel = 1;              // user space only: allowed at perf_event_paranoid 2
  attr.exclude_hv = 1;
  attr.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, 0, -1, group, 0));
}

struct Event {
  std::uint32_t type;
  std::uint64_t config;
};
constexpr Event kHardware[] = {{PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
                               {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
                               {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
                               {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
                               {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES}};
constexpr Event kSoftware[] = {{PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
                               {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES}};

// Opens `events` as one group on the calling thread; leader -1 and errno set on failure.
template <std::size_t N>
int open_group(const Event (&events)[N], int& members, int& error) {
  const int leader = open_event(events[0].type, events[0].config, -1);
  if (leader < 0) {
    error = errno;
    return -1;
  }
  members = 1;
  for (std::size_t i = 1; i < N; ++i) {
    if (open_event(events[i].type, events[i].config, leader) < 0) {
      // A PMU with fewer counters than the group asks for: the whole group or none.
      error = errno;
      close(leader);
      return -1;
    }
    ++members;
  }
  ioctl(leader, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
  return leader;
}

// values[i] of a group read, scaled by enabled / running when the kernel multiplexed it.
bool read_group(int leader, int members, double* values) {
  std::uint64_t buffer[3 + 8] = {};
  const auto want = static_cast<ssize_t>((3 + members) * sizeof(std::uint64_t));
  if (read(leader, buffer, sizeof buffer) < want || static_cast<int>(buffer[0]) != members) return false;
  const double enabled = static_cast<double>(buffer[1]), running = static_cast<double>(buffer[2]);
  const double scale = running > 0 ? enabled / running : 0;
  for (int i = 0; i < members; ++i) values[i] = static_cast<double>(buffer[3 + i]) * scale;
  return true;
}

int perf_event_paranoid() {
  std::ifstream in("/proc/sys/kernel/perf_event_paranoid");
  int value = 2;
  in >> value;
  return value;
}

}  // namespace

std::string perf_event_error_text(int error, int paranoid) {
  const char* name = strerrorname_np(error);
  const std::string call =
      std::string("perf_event_open ") + (name != nullptr ? name : std::to_string(error).c_str());
  switch (error) {
    case ENOENT:
    case EOPNOTSUPP:
    case ENODEV:
      return "this CPU or virtual machine exposes none: " + call;
    case EACCES:
    case EPERM:
      return "kernel.perf_event_paranoid=" + std::to_string(paranoid) + " forbids them: " + call +
             "; set it to 2 or lower, or grant CAP_PERFMON";
    case ENOSYS:
      return "the kernel or a seccomp filter refuses the call: " + call;
    default:
      return call + " (" + std::strerror(error) + ")";
  }
}

ThreadCounters& ThreadCounters::open(int threads) {
  static ThreadCounters counters;
  static std::once_flag once;
  std::call_once(once, [&] {
    const int n = std::max(1, threads);
    counters.hardware_groups_.assign(static_cast<std::size_t>(n), {});
    counters.software_groups_.assign(static_cast<std::size_t>(n), {});
    std::vector<int> hardware_errors(static_cast<std::size_t>(n), 0),
        software_errors(static_cast<std::size_t>(n), 0);
    // Each pool thread opens its own: a counter follows the thread that opened it (pid 0).
#pragma omp parallel num_threads(n)
    {
      const auto t = static_cast<std::size_t>(omp_get_thread_num());
      auto& h = counters.hardware_groups_[t];
      auto& s = counters.software_groups_[t];
      h.leader = open_group(kHardware, h.members, hardware_errors[t]);
      s.leader = open_group(kSoftware, s.members, software_errors[t]);
    }
    counters.hardware_ = counters.software_ = true;
    for (std::size_t t = 0; t < static_cast<std::size_t>(n); ++t) {
      if (counters.hardware_groups_[t].leader < 0 && counters.hardware_) {
        counters.hardware_ = false;
        counters.reason_ = perf_event_error_text(hardware_errors[t], perf_event_paranoid());
      }
      if (counters.software_groups_[t].leader < 0) counters.software_ = false;
    }
  });
  return counters;
}

CounterReading ThreadCounters::read() const {
  CounterReading r;
  r.hardware = hardware_;
  r.software = software_;
  double v[5];
  if (hardware_)
    for (const Group& g : hardware_groups_)
      if (read_group(g.leader, g.members, v)) {
        r.cycles += v[0], r.instructions += v[1], r.cache_references += v[2], r.cache_misses += v[3];
        r.branch_misses += v[4];
      }
  if (software_)
    for (const Group& g : software_groups_)
      if (read_group(g.leader, g.members, v)) r.task_seconds += v[0] * 1e-9, r.context_switches += v[1];
  return r;
}

CounterReading& CounterReading::operator+=(const CounterReading& o) {
  hardware = hardware || o.hardware;
  software = software || o.software;
  cycles += o.cycles, instructions += o.instructions, cache_references += o.cache_references;
  cache_misses += o.cache_misses, branch_misses += o.branch_misses;
  context_switches += o.context_switches, task_seconds += o.task_seconds;
  return *this;
}

CounterReading CounterReading::operator-(const CounterReading& o) const {
  CounterReading d = *this;
  d.cycles -= o.cycles, d.instructions -= o.instructions, d.cache_references -= o.cache_references;
  d.cache_misses -= o.cache_misses, d.branch_misses -= o.branch_misses;
  d.context_switches -= o.context_switches, d.task_seconds -= o.task_seconds;
  return d;
}

namespace {
// The pool as large as it will be: the machine's count, or more when --threads asks for more.
ThreadCounters& pool_counters() {
  return ThreadCounters::open(std::max(compute_threads(), runtime().threads.threads));
}
}  // namespace

CounterReading read_thread_counters() { return pool_counters().read(); }

std::string counters_unavailable_reason() { return pool_counters().unavailable_reason(); }

}  // namespace cpudl
