// The eager engine's per-op profile (CPUDL_PROFILE=1): an op's forward, each autograd node's
// backward and each optimiser step open a ProfileScope; the outermost scope on a thread records
// (time, FLOPs counted by the dense ops inside it, and under CPUDL_PROFILE=1 the pool threads'
// counters: perf_counters.h), so composite ops are charged once. Off, a scope costs one load of a
// constant.
#pragma once

#include <chrono>

#include "cpudl/runtime.h"

namespace cpudl {

// Adds to this thread's forward FLOP count (runtime.h: forward_flops): the dense ops call it.
void count_forward_flops(double flops);

namespace profiling {

bool enabled();  // CPUDL_PROFILE=1 (read once), or enable(true)

class Scope {
 public:
  // `op` and `phase` must outlive the profile (string literals, node names held by the graph
  // are copied when recorded).
  Scope(const char* op, const char* phase);
  explicit Scope(const char* op);  // phase: "backward" inside Tensor::backward, else "forward"
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* op_ = nullptr;
  const char* phase_ = nullptr;
  bool counted_ = false, recording_ = false;
  double flops_at_start_ = 0;
  std::chrono::steady_clock::time_point start_;
  CounterReading counters_at_start_;  // with CPUDL_PROFILE=1 (not for --report's timing alone)
};

// Marks this thread as running a backward pass (ops called by the engine itself, such as the
// summing of gradients, are charged to the backward phase).
class BackwardPhase {
 public:
  BackwardPhase();
  ~BackwardPhase();
  BackwardPhase(const BackwardPhase&) = delete;
  BackwardPhase& operator=(const BackwardPhase&) = delete;

 private:
  bool previous_;
};

}  // namespace profiling
}  // namespace cpudl
