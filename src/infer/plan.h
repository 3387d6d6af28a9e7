// A compiled plan: the graph specialised to one set of input shapes. Compiling infers every
// shape, folds everything computable from constants and shapes, fuses epilogues, builds each
// kernel once and lays every intermediate value into one arena whose buffers are reused once
// their value is dead (greedy by size over lifetimes). Running it allocates nothing.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpudl/inference.h"
#include "infer/graph.h"
#include "infer/op_registry.h"
#include "infer/optimizer.h"

namespace cpudl::infer {

struct PlanStats {
  std::size_t arena_bytes = 0;                      // the memory plan's peak: all intermediate values
  std::size_t unplanned_bytes = 0;                  // what one buffer per value would need
  std::size_t steps = 0;                            // kernels run per inference
  double flops = 0;                                 // per inference (multiply-adds x 2 of Conv, Gemm, MatMul)
  std::map<std::string, int> ops;                   // op -> count, after optimisation
  std::vector<NodeImplementation> implementations;  // where an operator has several algorithms
};

// Time spent per step, accumulated over runs when profiling is on (CPUDL_PROFILE=1).
struct StepProfile {
  std::string op, name;
  double flops = 0;
  double seconds = 0;
  std::int64_t calls = 0;
};

class Plan {
 public:
  // `graph` is the session's optimised graph; `input_shapes` in graph.inputs order.
  // `fuse`: apply the shape-dependent fusions (off only to measure what they bring).
  Plan(const Graph& graph, const std::vector<Shape>& input_shapes, OptimizerReport& report, bool fuse = true);
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // inputs in graph.inputs order, outputs in graph.outputs order (their buffers sized by
  // output_descs()). Not reentrant: the session serialises runs of one plan.
  void run(std::span<const TensorView> inputs, std::span<const TensorView> outputs);

  const std::vector<ValueDesc>& output_descs() const { return output_descs_; }
  const PlanStats& stats() const { return stats_; }
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<StepProfile>& profile() const { return profile_; }

 private:
  enum class Storage { constant, input, arena };
  struct Value {
    ValueDesc desc;
    Storage storage = Storage::arena;
    std::size_t index = 0;  // input index, or arena buffer index
    const void* constant = nullptr;
  };
  struct Step {
    Kernel kernel;
    std::vector<std::size_t> inputs, outputs;  // value indices (SIZE_MAX: omitted)
  };

  std::vector<Value> values_;
  std::vector<std::shared_ptr<const HostTensor>> constants_;  // keeps folded values alive
  std::vector<Step> steps_;
  std::vector<std::size_t> buffer_offsets_;
  std::vector<std::size_t> output_values_;
  std::vector<ValueDesc> output_descs_;
  std::unique_ptr<std::byte[], void (*)(std::byte*)> arena_{nullptr, nullptr};
  std::vector<TensorView> scratch_in_, scratch_out_;
  PlanStats stats_;
  bool profiling_ = false;
  std::vector<StepProfile> profile_;

  void* address(std::size_t value, std::span<const TensorView> inputs) const;
};

// Multiply-adds x 2 of a node with these input and output shapes (0 for data movement).
double node_flops(const Node& node, const std::vector<ValueDesc>& inputs,
                  const std::vector<ValueDesc>& outputs);

}  // namespace cpudl::infer
