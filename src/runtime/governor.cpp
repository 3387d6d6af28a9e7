// The governor's policy and its sampling thread (runtime/governor.h).
//
// Lowering is multiplicative (a quarter of the threads, at least one) and raising is measured:
// as many threads as CPUs stood idle, so a 64-core machine recovers in one step, not sixty. A
// limit (quota, affinity) applies at the next sample; contention must hold for `window` samples,
// so that one busy second of a neighbour does not cost a re-plan.
#include "runtime/governor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace cpudl {

namespace {

std::string percent(double share) { return std::to_string(static_cast<int>(std::lround(share * 100))) + "%"; }

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string change(int from, int to) {
  return std::to_string(from) + " -> " + std::to_string(to) + " thread" + (to == 1 ? "" : "s") + ": ";
}

}  // namespace

GovernorPolicy::GovernorPolicy(const GovernorConfig& config)
    : config_(config), threads_(std::max(1, config.max_threads)) {}

std::optional<GovernorDecision> GovernorPolicy::start(const std::vector<LoadSample>& probes) {
  std::vector<int> running;  // other processes' tasks
  int cpus = 0;
  for (const LoadSample& p : probes) {
    if (p.runnable) running.push_back(*p.runnable - p.own_runnable.value_or(1));
    if (p.affinity_cpus > 0) cpus = p.affinity_cpus;
    if (cpus == 0 && p.cpu_times) cpus = p.cpu_times->cpus;
  }
  if (running.empty() || cpus == 0) return std::nullopt;
  const int others = std::max(0, *std::min_element(running.begin(), running.end()));
  const int free = std::max(1, cpus - others);
  if (free >= threads_) return std::nullopt;
  GovernorDecision d{threads_, free, "busy_at_start",
                     change(threads_, free) + std::to_string(others) + " other task" +
                         (others == 1 ? "" : "s") + " running on " + std::to_string(cpus) + " CPU" +
                         (cpus == 1 ? "" : "s") + " at start"};
  threads_ = free;
  return d;
}

std::optional<GovernorDecision> GovernorPolicy::update(const LoadSample& now) {
  const std::optional<LoadSample> previous = previous_;
  previous_ = now;

  // Critical temperature first: pause until every zone that has a critical point cooled by the
  // margin. Nothing else changes while paused.
  const Temperature* hot = nullptr;
  bool cooled = true;
  for (const Temperature& t : now.temperatures) {
    if (!t.critical) continue;
    if (t.celsius >= *t.critical && hot == nullptr) hot = &t;
    if (t.celsius > *t.critical - config_.cool_margin_celsius) cooled = false;
  }
  if (!paused_ && hot != nullptr) {
    paused_ = true;
    GovernorDecision d{threads_, threads_, "temperature", "", true, false};
    d.text = "pausing: " + hot->zone + " at " + fixed(hot->celsius, 1) + " C, critical " +
             fixed(*hot->critical, 1) + " C";
    return d;
  }
  if (paused_) {
    if (!cooled) return std::nullopt;
    paused_ = false;
    GovernorDecision d{threads_, threads_, "temperature", "", false, true};
    d.text = "resuming: every zone " + fixed(config_.cool_margin_celsius, 0) + " C below its critical point";
    return d;
  }

  // What the process may use at most.
  int capacity = std::max(1, config_.max_threads);
  std::string limit_reason, limit_text;
  if (now.affinity_cpus > 0 && now.affinity_cpus < capacity) {
    capacity = now.affinity_cpus;
    limit_reason = "affinity";
    limit_text = "affinity allows " + std::to_string(capacity) + " CPU" + (capacity == 1 ? "" : "s");
  }
  if (now.quota_cpus) {
    // A fractional quota rounds down, as plan_threads does: a thread the quota cannot feed stalls
    // the others at every barrier once the period's budget is spent.
    const int quota = std::max(1, static_cast<int>(std::floor(*now.quota_cpus + 1e-9)));
    if (quota < capacity) {
      capacity = quota;
      limit_reason = "quota";
      limit_text = "cgroup quota " + fixed(*now.quota_cpus, 2) + " CPUs";
    }
  }
  if (threads_ > capacity) {
    GovernorDecision d{threads_, capacity, limit_reason, change(threads_, capacity) + limit_text};
    threads_ = capacity;
    overloaded_for_ = idle_for_ = 0;
    return d;
  }
  if (!previous) return std::nullopt;

  const double seconds = now.seconds - previous->seconds;
  if (seconds <= 0) return std::nullopt;
  pressure_.reset();
  steal_.reset();
  idle_.reset();
  neighbours_.reset();
  if (now.pressure_us && previous->pressure_us && *now.pressure_us >= *previous->pressure_us)
    pressure_ = std::min(1.0, (*now.pressure_us - *previous->pressure_us) / (seconds * 1e6));
  if (now.cpu_times && previous->cpu_times && now.cpu_times->total > previous->cpu_times->total) {
    steal_ = steal_share(*previous->cpu_times, *now.cpu_times, threads_);
    if (now.cpu_times->idle >= previous->cpu_times->idle)
      idle_ = static_cast<double>(now.cpu_times->idle - previous->cpu_times->idle) /
              static_cast<double>(now.cpu_times->total - previous->cpu_times->total) * now.cpu_times->cpus;
    // The CPUs other processes kept busy: all busy ticks but the hypervisor's and this process's.
    const auto busy = [](const CpuTimes& t) { return t.total - std::min(t.total, t.idle + t.steal); };
    if (now.own_cpu_ticks && previous->own_cpu_ticks && *now.own_cpu_ticks >= *previous->own_cpu_ticks) {
      const double others = static_cast<double>(busy(*now.cpu_times)) -
                            static_cast<double>(busy(*previous->cpu_times)) -
                            static_cast<double>(*now.own_cpu_ticks - *previous->own_cpu_ticks);
      neighbours_ = std::max(0.0, others) /
                    static_cast<double>(now.cpu_times->total - previous->cpu_times->total) *
                    now.cpu_times->cpus;
    }
  }

  // The first overload signal that holds, in the order of how directly it says "fewer threads".
  std::string reason, text;
  if (now.cgroup_periods && previous->cgroup_periods && now.cgroup_throttled_periods &&
      previous->cgroup_throttled_periods && *now.cgroup_periods > *previous->cgroup_periods) {
    const double share =
        static_cast<double>(*now.cgroup_throttled_periods - *previous->cgroup_throttled_periods) /
        static_cast<double>(*now.cgroup_periods - *previous->cgroup_periods);
    if (share >= config_.throttled_high) {
      reason = "cgroup_throttling";
      text = "cgroup throttled in " + percent(share) + " of its periods";
    }
  }
  if (reason.empty() && pressure_ && *pressure_ >= config_.pressure_high &&
      !(neighbours_ && *neighbours_ < config_.neighbour_cpus_low)) {
    reason = "pressure";
    text = "CPU pressure " + percent(*pressure_);
  }
  if (reason.empty() && steal_ && *steal_ >= config_.steal_high) {
    reason = "steal";
    text = "hypervisor steal " + percent(*steal_);
  }
  if (reason.empty() && now.thermal_throttle_events && previous->thermal_throttle_events &&
      *now.thermal_throttle_events > *previous->thermal_throttle_events) {
    reason = "thermal_throttling";
    text = std::to_string(*now.thermal_throttle_events - *previous->thermal_throttle_events) +
           " thermal throttling events";
  }
  if (reason.empty() && now.frequency_ratio && *now.frequency_ratio <= config_.frequency_low) {
    reason = "frequency";
    text = "CPUs at " + percent(*now.frequency_ratio) + " of their maximum frequency";
  }

  if (!reason.empty()) {
    idle_for_ = 0;
    if (threads_ <= 1 || ++overloaded_for_ < config_.window) return std::nullopt;
    overloaded_for_ = 0;
    const int to = std::max(1, threads_ - std::max(1, threads_ / 4));
    GovernorDecision d{threads_, to, reason,
                       change(threads_, to) + text + " for " + std::to_string(config_.window) + " samples"};
    threads_ = to;
    return d;
  }
  overloaded_for_ = 0;
  if (threads_ < capacity && idle_ && *idle_ >= config_.idle_to_raise) {
    if (++idle_for_ < config_.window) return std::nullopt;
    idle_for_ = 0;
    const int to = std::min(capacity, threads_ + std::max(1, static_cast<int>(std::floor(*idle_ + 0.25))));
    GovernorDecision d{threads_, to, "idle",
                       change(threads_, to) + fixed(*idle_, 1) + " CPUs idle for " +
                           std::to_string(config_.window) + " samples"};
    threads_ = to;
    return d;
  }
  idle_for_ = 0;
  return std::nullopt;
}

std::filesystem::path governor_root() {
  const char* root = std::getenv("CPUDL_GOVERNOR_ROOT");
  return root != nullptr && *root != '\0' ? std::filesystem::path(root) : std::filesystem::path("/");
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Governor::Governor(GovernorOptions options)
    : options_(std::move(options)),
      sampler_(options_.root, options_.log),
      policy_(options_.config),
      threads_(policy_.threads()) {
  status_.threads = policy_.threads();
  // The first sample before any work: a quota or affinity already below the ceiling applies to
  // the first step.
  start_seconds_ = steady_seconds();
  const LoadSample first = sampler_.sample(start_seconds_);
  if (first.cgroup_throttled_us) first_throttled_us_ = first.cgroup_throttled_us;
  const auto decision = policy_.update(first);
  record(decision, 0.0);
  if (decision && options_.log) options_.log("governor: " + decision->text);
  thread_ = std::thread([this] { loop(); });
}

void Governor::record(const std::optional<GovernorDecision>& decision, double seconds) {
  if (!decision) return;
  threads_ = policy_.threads();
  paused_ = policy_.paused();
  status_.threads = policy_.threads();
  status_.paused = policy_.paused();
  ++status_.decisions[decision->reason];
  status_.events.push_back({seconds, *decision});
}

Governor::~Governor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Governor::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  // The neighbours running now: twenty looks over 100 ms while the work starts (it does not wait
  // for them), the least of them counted, so that a process passing through (a shell, a pipe's
  // reader starting up) is not taken for one.
  std::vector<LoadSample> probes;
  for (int i = 0; i < 20 && !stopping_; ++i) {
    lock.unlock();
    probes.push_back(sampler_.sample(steady_seconds(), true));
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_; });
  }
  if (stopping_) return;
  const auto start = policy_.start(probes);
  record(start, steady_seconds() - start_seconds_);
  if (start && options_.log) {
    lock.unlock();
    options_.log("governor: " + start->text);
    lock.lock();
  }
  while (true) {
    wake_.wait_for(lock, std::chrono::duration<double>(options_.interval_seconds), [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    const LoadSample sample = sampler_.sample(steady_seconds());
    const auto decision = policy_.update(sample);
    lock.lock();
    record(decision, sample.seconds - start_seconds_);
    status_.threads = policy_.threads();
    status_.paused = policy_.paused();
    status_.pressure_ratio = policy_.pressure_ratio();
    status_.steal_ratio = policy_.steal_ratio();
    status_.temperatures = sample.temperatures;
    if (sample.cgroup_throttled_us) {
      if (!first_throttled_us_) first_throttled_us_ = sample.cgroup_throttled_us;
      status_.throttled_seconds = std::max(0.0, (*sample.cgroup_throttled_us - *first_throttled_us_) / 1e6);
    }
    const GovernorStatus status = status_;
    lock.unlock();
    // The line first, then the waiting work: "resuming" is said before the next step runs.
    if (decision && options_.log) options_.log("governor: " + decision->text);
    if (decision && decision->resume) wake_.notify_all();
    if (options_.on_sample) options_.on_sample(status);
    lock.lock();
  }
}

void Governor::wait_while_paused() const {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return !paused_.load() || stopping_; });
}

GovernorStatus Governor::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

}  // namespace cpudl
