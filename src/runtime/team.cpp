#include "runtime/team.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "cpudl/runtime.h"

namespace cpudl {

// Members spin while the wait is the microseconds a step's imbalance takes (~0.2 ms of PAUSE),
// then yield the CPU, so a member the hypervisor took away still gets it back. A team with more
// members than the CPUs it may run on yields at once: a spinning member would hold the CPU the
// one it waits for needs.
void Team::set_size(int size) {
  size_ = size;
  const SystemInfo& system = runtime().system;
  double cpus = system.affinity.empty() ? static_cast<double>(system.online_cpus.size())
                                        : static_cast<double>(system.affinity.size());
  if (system.cgroup_cpu.cpus) cpus = std::min(cpus, std::ceil(*system.cgroup_cpu.cpus));
  spins_ = cpus > 0 && size > cpus ? 0 : 1 << 14;
}

// A central counter and a generation number: the last to arrive resets the counter, then moves
// the generation on, which releases the others.
void Team::barrier() {
  const unsigned generation = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    generation_.store(generation + 1, std::memory_order_release);
    return;
  }
  for (int spins = 0; generation_.load(std::memory_order_acquire) == generation; ++spins) {
    if (aborted_.load(std::memory_order_relaxed)) return;
    if (spins < spins_)
      __builtin_ia32_pause();
    else
      std::this_thread::yield();
  }
}

}  // namespace cpudl
