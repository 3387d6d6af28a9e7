// Hardware and scheduler counters of the compute threads through perf_event_open(2), for the
// profile of CPUDL_PROFILE=1: cycles and instructions (IPC), cache references and misses, branch
// misses, and the context switches and CPU time the scheduler gave them. Each thread of the
// OpenMP pool (the calling thread is its first) opens its own counters, user space only, since
// an inherited counter does not report a live thread's count; a reading sums them.
//
// Virtual machines often expose no PMU and containers often forbid the call: then the hardware
// counters are unavailable and say why in one line, and the scheduler's (software) counters are
// still read where the kernel allows them.
#pragma once

#include <string>
#include <vector>

#include "cpudl/runtime.h"

namespace cpudl {

class ThreadCounters {
 public:
  // Opens the counters on `threads` pool threads (once per process; later calls return the same).
  static ThreadCounters& open(int threads);
  CounterReading read() const;  // summed over the threads, scaled for multiplexing
  bool hardware() const { return hardware_; }
  bool software() const { return software_; }
  const std::string& unavailable_reason() const { return reason_; }  // empty when hardware() is true

 private:
  ThreadCounters() = default;
  struct Group {
    int leader = -1;
    int members = 0;
  };
  std::vector<Group> hardware_groups_, software_groups_;
  bool hardware_ = false, software_ = false;
  std::string reason_;
};

// Why perf_event_open failed with `error`, for people: what to change, if anything can be.
std::string perf_event_error_text(int error, int paranoid);

}  // namespace cpudl
