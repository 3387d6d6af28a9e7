// train --max-memory: a training step's tensors kept under a limit. Before the first step, two
// probe steps on 2 and 4 samples measure what the model's step takes per sample and in all
// (live tensor bytes, counted by the allocator); the plan is the largest micro-batch (via
// --accumulate) that fits, with activation checkpointing when the model has segments and the
// micro-batch would otherwise fall below 16; the limit is then enforced on every allocation, so a
// step the estimate got wrong ends with one line instead of the kernel's OOM kill.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cpudl/nn.h"

namespace cpudl::train {

// "2G", "1.5GiB", "800M", "64K" or plain bytes (binary units: G = 2^30). UsageError naming
// `flag` on anything else.
std::size_t parse_memory_size(const std::string& text, const std::string& flag);

struct MemoryPlan {
  std::int64_t accumulate = 1;
  bool checkpoint_activations = false;
  std::size_t fixed_bytes = 0;       // weights, gradients, optimiser state, data and batches
  std::size_t per_sample_bytes = 0;  // activations (and their gradients) per sample of a micro-batch
  std::size_t estimated_peak = 0;
};

struct MemoryProblem {
  nn::Module& model;
  Tensor x, y;                  // at least one batch's samples and labels, for the probes
  std::int64_t batch = 1;       // the global batch: --accumulate must divide it
  std::int64_t rows = 1;        // this rank's rows of each batch (all of it on one process)
  std::int64_t accumulate = 1;  // the smallest --accumulate to consider (the one given)
  std::size_t limit = 0;
  bool checkpointing_required = false;  // --checkpoint-activations given: plan with it only
};

// Probes and plans (the model's buffers, gradients and the random state are restored after the
// probes, so the run equals one without them). UsageError when the limit is below the weights and
// state, or below them plus one sample: the message says what would fit.
MemoryPlan plan_memory(const MemoryProblem& problem);

// Holds live tensor bytes to `bytes` (0: no limit) for its scope (runtime's
// set_tensor_memory_limit), restoring the previous limit after.
class TensorMemoryLimit {
 public:
  explicit TensorMemoryLimit(std::size_t bytes);
  ~TensorMemoryLimit();
  TensorMemoryLimit(const TensorMemoryLimit&) = delete;
  TensorMemoryLimit& operator=(const TensorMemoryLimit&) = delete;

 private:
  std::size_t previous_;
};

// The cgroup memory limit left for tensors (the limit minus what the process holds besides its
// tensors, less 5%), or 0 when there is none.
std::size_t cgroup_tensor_budget();

}  // namespace cpudl::train
