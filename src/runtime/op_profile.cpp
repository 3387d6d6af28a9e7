// The eager engine's forward FLOP count and per-op profile (op_profile.h; runtime.h: op_profile()).
#include "runtime/op_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cpudl/runtime.h"

namespace cpudl {
namespace {

bool profile_variable() {
  const char* env = std::getenv("CPUDL_PROFILE");
  return env && std::strcmp(env, "1") == 0;
}
std::atomic<bool> g_enabled{profile_variable()};
// Counters only when CPUDL_PROFILE=1 asks (their reads cost a few system calls per op); the
// report's per-op times (enable_op_profile) go without.
const bool g_counting = profile_variable();
thread_local int t_depth = 0;
// Per thread, so concurrent models do not mix their counts.
thread_local double t_forward_flops = 0;
thread_local bool t_backward = false;

std::mutex g_mutex;
std::map<std::pair<std::string, std::string>, OpTime>& table() {
  static std::map<std::pair<std::string, std::string>, OpTime> t;
  return t;
}

}  // namespace

void count_forward_flops(double flops) { t_forward_flops += flops; }
double forward_flops() { return t_forward_flops; }
void reset_forward_flops() { t_forward_flops = 0; }

namespace profiling {

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

Scope::Scope(const char* op, const char* phase) : op_(op), phase_(phase) {
  if (!enabled()) return;
  counted_ = true;
  if (t_depth++ > 0) return;
  recording_ = true;
  flops_at_start_ = forward_flops();
  if (g_counting) counters_at_start_ = read_thread_counters();
  start_ = std::chrono::steady_clock::now();
}

Scope::Scope(const char* op) : Scope(op, t_backward ? "backward" : "forward") {}

Scope::~Scope() {
  if (!counted_) return;
  --t_depth;
  if (!recording_) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double flops = forward_flops() - flops_at_start_;
  const CounterReading counters = g_counting ? read_thread_counters() - counters_at_start_ : CounterReading{};
  std::lock_guard<std::mutex> lock(g_mutex);
  OpTime& t = table()[{op_, phase_}];
  if (t.calls == 0) t.op = op_, t.phase = phase_;
  ++t.calls;
  t.seconds += seconds;
  t.flops += flops;
  t.counters += counters;
}

BackwardPhase::BackwardPhase() : previous_(t_backward) { t_backward = true; }
BackwardPhase::~BackwardPhase() { t_backward = previous_; }

}  // namespace profiling

void enable_op_profile(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool op_profiling_enabled() { return profiling::enabled(); }

std::vector<OpTime> op_profile() {
  std::vector<OpTime> out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto& [key, t] : table()) out.push_back(t);
  }
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

void reset_op_profile() {
  std::lock_guard<std::mutex> lock(g_mutex);
  table().clear();
}

}  // namespace cpudl
