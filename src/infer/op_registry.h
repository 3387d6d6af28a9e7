// How an operator plugs into the runtime: one build function per operator (ops/*.cpp) that, given
// its node and the concrete shapes (and constant values) of its inputs, checks them, sets its
// outputs' types and shapes, and returns the kernel that computes them. Build runs once per plan;
// the kernel runs on every inference and must not allocate.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpudl/error.h"
#include "infer/graph.h"

namespace cpudl::infer {

struct ValueDesc {
  DType dtype = DType::f32;
  Shape shape;
  bool present = true;  // false for an omitted optional input
  // The shape is an upper bound: the value depends on data-dependent sizes (the boxes a
  // NonMaxSuppression keeps, the elements NonZero finds) and its run-time shape, no larger, is
  // known only when it is computed. The plan reserves the bound (see plan.h).
  bool bounded = false;
  std::int64_t numel() const { return shape_numel(shape); }
};

// A value's memory during a run: contiguous, row-major.
struct TensorView {
  DType dtype = DType::f32;
  const Shape* shape = nullptr;
  void* data = nullptr;
  // For the outputs of an operator whose output sizes depend on its input data
  // (OpSetup::sets_output_shapes): where its kernel writes the shape it produced.
  Shape* run_shape = nullptr;
  float* f32() const { return static_cast<float*>(data); }
};

using Kernel = std::function<void(std::span<const TensorView> inputs, std::span<const TensorView> outputs)>;

struct OpSetup {
  const Node& node;
  std::int64_t opset = 0;
  std::vector<ValueDesc> inputs;
  std::vector<const HostTensor*> constants;  // per input: its value when known at plan time
  std::vector<ValueDesc> outputs;            // filled by the build function
  // Output 0 shares input 0's memory (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout):
  // the kernel is then empty and no copy is made.
  bool output_aliases_input = false;
  // Output 0 may be written over input `in_place_input` (same shape and type): the plan gives it that
  // input's buffer when the value dies at this node, and the kernel finds the two data pointers
  // equal; otherwise the kernel gets a buffer of its own (and copies if it needs the values there).
  std::optional<std::size_t> in_place_input;
  // Planning's first pass, which builds every kernel for its output shapes (and runs it only to
  // fold constants): choices made here are not the plan's.
  bool shape_pass = false;
  // Which algorithm the kernel runs, where an operator has several (`cpudl info` lists it).
  std::string implementation;
  // The output sizes depend on the input data (NonZero, NonMaxSuppression, If): the build function
  // sets each output to its bound (largest possible shape), and the kernel reads its inputs' actual
  // shapes from their views and writes each output's actual shape to its view's run_shape. Such a
  // kernel is built once; other operators whose inputs are bounded are rebuilt for the actual
  // shapes when those change (plan.cpp).
  bool sets_output_shapes = false;
  // PlanOptions::max_loop_iterations of the plan being made (Loop's bound).
  std::int64_t max_loop_iterations = 0;

  std::size_t count() const { return inputs.size(); }
  bool has(std::size_t i) const { return i < inputs.size() && inputs[i].present; }
  const Shape& shape(std::size_t i) const { return inputs.at(i).shape; }
  // The value of a constant input; throws naming the node when it is not known at plan time.
  const HostTensor& constant(std::size_t i, const char* what) const;
  [[noreturn]] void fail(const std::string& what) const;
  void require_inputs(std::size_t min, std::size_t max) const;
  void require_f32(std::size_t i) const;
  void require_present_f32() const;  // every input given is FLOAT
  void set_output(std::size_t i, DType dtype, Shape shape) {
    if (outputs.size() <= i) outputs.resize(i + 1);
    outputs[i] = ValueDesc{dtype, std::move(shape), true};
  }
};

using BuildFn = Kernel (*)(OpSetup& setup);

// The build function of `op` (an op_list.h name or an internal fused op), or null.
BuildFn find_op(const std::string& op);

// Each ops/*.cpp registers its operators through one of these tables.
struct OpEntry {
  const char* name;
  BuildFn build;
};
std::span<const OpEntry> elementwise_ops();
std::span<const OpEntry> dense_ops();
std::span<const OpEntry> shape_ops();
std::span<const OpEntry> normalization_ops();
std::span<const OpEntry> quantization_ops();
std::span<const OpEntry> reduction_ops();
std::span<const OpEntry> detection_ops();
std::span<const OpEntry> control_flow_ops();
std::span<const OpEntry> resize_ops();
std::span<const OpEntry> elementwise_nary_ops();
std::span<const OpEntry> indexing_ops();
std::span<const OpEntry> roi_align_ops();
// For `cpudl info`: how this CPU runs the int8 operators among `planned_ops` (the kernel chosen,
// whether it is exact without VNNI, what QDQ pairs cost), or "" when the plan has none.
std::string describe_int8_execution(const std::map<std::string, int>& planned_ops);

// Axis in [-rank, rank) (or [-rank-1, rank] when `inclusive_end`) -> [0, rank); throws otherwise.
std::int64_t normalize_axis(const OpSetup& setup, std::int64_t axis, std::int64_t rank, const char* what);
// NumPy broadcasting of two shapes; throws naming the node when they do not broadcast.
Shape broadcast_shapes(const OpSetup& setup, const Shape& a, const Shape& b);

}  // namespace cpudl::infer
