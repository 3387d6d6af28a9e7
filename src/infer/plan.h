// A compiled plan: the graph specialised to one set of input shapes. Compiling infers every
// shape, folds everything computable from constants and shapes, fuses epilogues, builds each
// kernel once and lays every intermediate value into one arena whose buffers are reused once
// their value is dead (greedy by size over lifetimes). Running it allocates nothing.
//
// Data-dependent sizes (a detector's post-processing: NonZero, NonMaxSuppression, If) are planned
// at their bound: such an operator reports the largest shape it can produce (ValueDesc::bounded),
// everything computed from it is planned at that bound, and the arena reserves it, so a run never
// reallocates. At run time the plan tracks each bounded value's actual shape; an operator reading
// one is rebuilt (its build function run again on the actual shapes and on the actual values of
// small integer inputs, such as a Reshape's target computed from a Shape) whenever those differ
// from its last run. Rebuilding is cheap next to the network before it: it happens only in the
// post-processing tail, on tensors of a few thousand elements.
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
  std::int64_t alone_calls = 0;  // of the calls, those run on the calling thread alone (too small to share)
};

// The session's choices a plan is made with; a subgraph's plan (If, Loop) takes its node's.
struct PlanOptions {
  bool fuse = true;  // apply the shape-dependent fusions (off only to measure what they bring)
  // The most iterations a Loop node may run before the run fails: a bound for loops that end on a
  // condition, and what their scan outputs are planned for.
  std::int64_t max_loop_iterations = InferenceOptions::kDefaultMaxLoopIterations;
};

class Plan {
 public:
  // `graph` is the session's optimised graph; `input_shapes` in graph.inputs order.
  // `bounded_inputs` (by input, may be empty): inputs given at run time with shapes no larger than
  // `input_shapes` (a subgraph reading its If's bounded values).
  Plan(const Graph& graph, const std::vector<Shape>& input_shapes, OptimizerReport& report,
       const PlanOptions& options = {}, const std::vector<bool>& bounded_inputs = {});
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // inputs in graph.inputs order, outputs in graph.outputs order (their buffers sized by
  // output_descs(), the bound for a bounded output; may be empty: copy_output then reads them).
  // Not reentrant: the session serialises runs of one plan.
  void run(std::span<const TensorView> inputs, std::span<const TensorView> outputs);
  // After run(): an output's actual shape (its desc's for an output that is not bounded), and its
  // values copied to `destination` (sized for that shape). The run's inputs must still be alive.
  const Shape& output_shape(std::size_t o) const { return run_shapes_[output_values_.at(o)]; }
  void copy_output(std::size_t o, void* destination) const;
  bool has_bounded_outputs() const;

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
    const HostTensor* host = nullptr;  // the constant's tensor (rebuilding a bounded step reads it)
  };
  struct Step {
    Kernel kernel;
    std::vector<std::size_t> inputs, outputs;  // value indices (SIZE_MAX: omitted)
    // Reads a bounded value: rebuilt when its inputs' actual shapes (or small integer values)
    // change, unless it sets its output shapes itself.
    bool bounded = false, sets_output_shapes = false;
    bool one_thread = false;              // too little work to share across threads (plan.cpp's small_step)
    std::shared_ptr<const Node> node;     // for rebuilding
    std::vector<std::int64_t> built_for;  // the signature its kernel was built for
    std::vector<std::shared_ptr<HostTensor>> run_values;  // small integer inputs, as built for
  };

  std::vector<Value> values_;
  std::vector<std::shared_ptr<const HostTensor>> constants_;  // keeps folded values alive
  std::vector<Step> steps_;
  std::vector<std::size_t> buffer_offsets_;
  std::vector<std::size_t> output_values_;
  std::vector<ValueDesc> output_descs_;
  std::unique_ptr<std::byte[], void (*)(std::byte*)> arena_{nullptr, nullptr};
  std::vector<TensorView> scratch_in_, scratch_out_;
  std::vector<Shape> run_shapes_;          // per value: its shape in the current run
  std::vector<std::size_t> buffer_bytes_;  // per arena buffer: what it holds at most
  std::vector<TensorView> run_inputs_;     // the current run's inputs (copy_output)
  std::vector<std::size_t> input_values_;  // the graph inputs' values, in order
  std::int64_t opset_ = 0;
  PlanOptions options_;
  std::vector<std::int64_t> signature_;  // scratch: a bounded step's current signature
  PlanStats stats_;
  bool profiling_ = false;
  std::vector<StepProfile> profile_;

  void* address(std::size_t value, std::span<const TensorView> inputs) const;
  void rebuild_if_changed(Step& step, std::span<const TensorView> inputs);
};

// Multiply-adds x 2 of a node with these input and output shapes (0 for data movement).
double node_flops(const Node& node, const std::vector<ValueDesc>& inputs,
                  const std::vector<ValueDesc>& outputs);

}  // namespace cpudl::infer
