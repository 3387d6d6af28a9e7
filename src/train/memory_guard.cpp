// train --max-memory (memory_guard.h). The estimate is measured, not modelled layer by layer:
// the allocator already counts every tensor byte (runtime's live/peak tensor bytes), and two
// probe steps on different micro-batch sizes separate what grows with the samples from what
// does not, whatever the architecture, precision or kernels.
#include "train/memory_guard.h"

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "cpudl/runtime.h"

namespace cpudl::train {

std::size_t parse_memory_size(const std::string& text, const std::string& flag) {
  const auto bad = [&] {
    return UsageError(flag + " " + text + ": expected a size such as 2G, 1.5GiB, 800M or a number of bytes");
  };
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = text.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();  // "GB", "GiB"
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.pop_back();
  double scale = 1;
  if (unit.empty())
    scale = 1;
  else if (unit == "K" || unit == "k")
    scale = 1024.0;
  else if (unit == "M" || unit == "m")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw bad();
  if (!(value > 0) || !std::isfinite(value * scale) || value * scale > 1e18) throw bad();
  return static_cast<std::size_t>(value * scale);
}

namespace {

struct Probe {
  double fixed = 0, per_sample = 0;
};

// The peak of live tensor bytes above those alive now, during forward and backward on the first
// `n` samples (the gradients, allocated by the first backward, count once: they are zeroed, not
// freed, between the probes; the caller counts them in the fixed part).
double probe_step(nn::Module& model, const Tensor& x, const Tensor& y, std::int64_t n) {
  const std::size_t base = live_tensor_bytes();
  reset_peak_tensor_bytes();
  {
    Tensor loss = cross_entropy(model.forward(x.slice(0, 0, n)), y.slice(0, 0, n));
    loss.backward();
  }
  const double peak = static_cast<double>(peak_tensor_bytes() - base);
  model.zero_grad();
  return peak;
}

Probe probe(nn::Module& model, const Tensor& x, const Tensor& y, std::int64_t rows, bool checkpointed) {
  model.checkpoint_activations(checkpointed);
  // Two sizes: the difference is what one more sample costs, the rest is what any step costs
  // (workspaces, the loss). Sizes of 2 and 4 keep batch normalisation's statistics defined.
  const std::int64_t small = std::min<std::int64_t>(2, rows), large = std::min<std::int64_t>(4, rows);
  (void)probe_step(model, x, y, small);  // first: the gradients' own buffers appear here
  const double a = probe_step(model, x, y, small);
  const double b = large > small ? probe_step(model, x, y, large) : a;
  Probe p;
  p.per_sample = large > small ? std::max(0.0, (b - a) / static_cast<double>(large - small))
                               : a / static_cast<double>(small);
  p.fixed = std::max(0.0, a - p.per_sample * static_cast<double>(small));
  model.checkpoint_activations(false);
  return p;
}

}  // namespace

MemoryPlan plan_memory(const MemoryProblem& q) {
  nn::Module& model = q.model;
  // The probes must leave no trace: batch normalisation's running statistics and counters,
  // the random state (dropout), the gradients.
  std::vector<Tensor> saved;
  for (const auto& [name, t] : model.named_buffers()) saved.push_back(t.clone());
  const std::uint64_t rng = default_generator().state();
  const std::size_t params = static_cast<std::size_t>(model.parameter_count()) * 4;
  const std::size_t before = live_tensor_bytes();
  const std::int64_t probe_rows = std::min<std::int64_t>(q.rows, q.x.size(0));
  const bool can_checkpoint = model.checkpoint_activations(false);
  const Probe ckpt = can_checkpoint ? probe(model, q.x, q.y, probe_rows, true) : Probe{};
  const Probe plain = q.checkpointing_required ? ckpt : probe(model, q.x, q.y, probe_rows, false);
  {
    std::size_t i = 0;
    for (const auto& [name, t] : model.named_buffers()) {
      const Tensor& from = saved[i++];
      std::memcpy(t.raw_data(), from.raw_data(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
      t.bump_version();
    }
  }
  default_generator().seed(rng);
  for (const Tensor& p : model.parameters()) p.set_grad(Tensor());

  // What every step holds whatever its micro-batch: the tensors alive now (data, weights, the
  // optimiser's state, allocated with the optimiser), the gradients, a batch being trained and
  // one being assembled.
  const double sample_bytes = static_cast<double>(q.x.numel() / std::max<std::int64_t>(q.x.size(0), 1)) * 4;
  const double resident =
      static_cast<double>(before + params) + 2.0 * static_cast<double>(q.batch) * sample_bytes;
  const double budget = 0.9 * static_cast<double>(q.limit);  // 10% for what the estimate misses
  MemoryPlan plan;
  plan.fixed_bytes = static_cast<std::size_t>(resident);
  if (resident + plain.fixed >= budget)
    throw UsageError("--max-memory " + byte_size_text(q.limit) +
                     " is below what the run holds before any activation: weights, gradients, optimiser "
                     "state and data take " +
                     byte_size_text(static_cast<std::size_t>(resident + plain.fixed)) + "; --max-memory " +
                     byte_size_text(static_cast<std::size_t>((resident + plain.fixed) / 0.9 * 1.25)) +
                     " would leave room for a few samples");
  const auto micro_of = [&](std::int64_t k) { return (q.rows + k - 1) / k; };
  const auto peak_of = [&](const Probe& p, std::int64_t k) {
    return resident + p.fixed + p.per_sample * static_cast<double>(micro_of(k));
  };
  // The smallest --accumulate (a divisor of the batch, from the one given) whose micro-batch fits.
  const auto smallest_fit = [&](const Probe& p) -> std::int64_t {
    for (std::int64_t k = std::max<std::int64_t>(q.accumulate, 1); k <= q.batch; ++k)
      if (q.batch % k == 0 && peak_of(p, k) <= budget) return k;
    return 0;
  };
  const std::int64_t k_plain = smallest_fit(plain);
  const std::int64_t k_ckpt = can_checkpoint ? smallest_fit(ckpt) : 0;
  // Recomputation costs about a quarter more time; micro-batches below 16 cost more than that in
  // the kernels' efficiency, so checkpointing is chosen only to keep micro-batches from shrinking
  // below 16 (or when nothing else fits).
  const bool use_ckpt =
      q.checkpointing_required ||
      (k_ckpt > 0 && (k_plain == 0 || (micro_of(k_plain) < std::min<std::int64_t>(16, q.rows) &&
                                       micro_of(k_ckpt) > micro_of(k_plain))));
  if (k_plain == 0 && k_ckpt == 0) {
    const Probe& best = can_checkpoint ? ckpt : plain;
    const double need = resident + best.fixed + best.per_sample;
    throw UsageError("--max-memory " + byte_size_text(q.limit) + " cannot hold one sample's step: weights, " +
                     "state and data take " +
                     byte_size_text(static_cast<std::size_t>(resident + best.fixed)) + " and each sample " +
                     byte_size_text(static_cast<std::size_t>(best.per_sample)) +
                     (can_checkpoint ? " with activation checkpointing" : "") + "; --max-memory " +
                     byte_size_text(static_cast<std::size_t>(need / 0.9 * 1.05)) + " would fit");
  }
  plan.checkpoint_activations = use_ckpt;
  plan.accumulate = use_ckpt ? k_ckpt : k_plain;
  const Probe& chosen = use_ckpt ? ckpt : plain;
  plan.fixed_bytes = static_cast<std::size_t>(resident + chosen.fixed);
  plan.per_sample_bytes = static_cast<std::size_t>(chosen.per_sample);
  plan.estimated_peak = static_cast<std::size_t>(peak_of(chosen, plan.accumulate));
  return plan;
}

TensorMemoryLimit::TensorMemoryLimit(std::size_t bytes) : previous_(tensor_memory_limit()) {
  set_tensor_memory_limit(bytes);
}
TensorMemoryLimit::~TensorMemoryLimit() { set_tensor_memory_limit(previous_); }

std::size_t cgroup_tensor_budget() {
  const SystemInfo system = read_system_info();
  if (!system.cgroup_memory_limit_bytes) return 0;
  // Resident bytes now (code, libraries, heap) minus the tensors: what the limit must also hold.
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident_pages = 0;
  statm >> pages >> resident_pages;
  const std::size_t resident = resident_pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t other = resident > live_tensor_bytes() ? resident - live_tensor_bytes() : 0;
  const std::size_t limit = *system.cgroup_memory_limit_bytes;
  return limit > other ? (limit - other) / 20 * 19 : 0;
}

}  // namespace cpudl::train
