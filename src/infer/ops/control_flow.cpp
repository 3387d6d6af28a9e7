// If and Loop: each subgraph is a plan of its own (plan.h), compiled once for the shapes its node
// reads. The loader made every value a subgraph reads from outside into an input of its node
// (Graph::captures), so here they arrive as ordinary inputs; those known at plan time are baked
// into the subgraph as constants, so it folds and fuses like any graph.
//
// If runs the branch the condition picks. A branch's outputs may differ in size between branches
// (torchvision's batched_nms returns an empty tensor in one): the If is then planned at the larger
// size and reports what ran.
//
// Loop runs its body plan once per iteration, the loop-carried values passed between two buffer
// sets made at build time (a run allocates nothing). Carried values must keep their shape (or
// their bound) from one iteration to the next, as the loops PyTorch exports from scripted code
// do; scan outputs are written row by row into an output planned for the most iterations the
// loop can run: its trip count when that is a constant, else the session's max_loop_iterations.
#include <algorithm>
#include <cstring>

#include "infer/op_registry.h"
#include "infer/plan.h"

namespace cpudl::infer {
namespace {

// A subgraph planned for its node's input shapes. Its first inputs are the ones the node feeds
// itself (`leading`: a Loop's iteration number, condition and carried values; none for an If); the
// rest are its outer-scope reads, subgraph input i being node input i + `offset`: those known at
// plan time are baked in as constants, the others stay plan inputs.
struct Subgraph {
  std::shared_ptr<Plan> plan;
  std::vector<std::size_t> captures;  // node inputs that feed the plan's inputs after the leading ones
};

Subgraph compile_subgraph(OpSetup& s, const Graph& sub, std::span<const ValueDesc> leading,
                          std::size_t offset, const std::string& what) {
  Graph g = sub;
  g.inputs.clear();
  Subgraph b;
  std::vector<Shape> shapes;
  std::vector<bool> bounded;
  for (std::size_t i = 0; i < leading.size(); ++i) {
    g.inputs.push_back(ValueInfo{sub.inputs[i].name, leading[i].dtype, {}});
    shapes.push_back(leading[i].shape);
    bounded.push_back(leading[i].bounded);
  }
  for (std::size_t i = leading.size(); i < sub.inputs.size(); ++i) {
    const ValueDesc& d = s.inputs[i + offset];
    const HostTensor* known = s.constants[i + offset];
    if (known && !d.bounded) {  // a value fixed at plan time (not one computed at a bound)
      g.constants[sub.inputs[i].name] = std::make_shared<HostTensor>(*known);
      continue;
    }
    g.inputs.push_back(ValueInfo{sub.inputs[i].name, d.dtype, {}});
    shapes.push_back(d.shape);
    bounded.push_back(d.bounded);
    b.captures.push_back(i + offset);
  }
  OptimizerReport report;
  try {
    b.plan = std::make_shared<Plan>(g, shapes, report, PlanOptions{true, s.max_loop_iterations}, bounded);
  } catch (const Error& e) {
    s.fail(what + ": " + e.what());
  }
  return b;
}

// Node inputs: [cond, captures x C]; branch inputs: [captures x C].
Subgraph compile_branch(OpSetup& s, const char* name) {
  const auto it = s.node.attributes.find(name);
  if (it == s.node.attributes.end() || it->second.kind != Attribute::Kind::graph)
    s.fail(std::string("has no '") + name + "' subgraph");
  const Graph& branch = *it->second.g;
  if (branch.inputs.size() + 1 != s.count())
    s.fail(std::string(name) + " reads " + std::to_string(branch.inputs.size()) +
           " outer value(s), the node passes " + std::to_string(s.count() - 1));
  return compile_subgraph(s, branch, {}, 1, name);
}

Kernel build_if(OpSetup& s) {
  if (s.count() < 1 || !s.has(0)) s.fail("has no condition input");
  if (s.inputs[0].numel() != 1) s.fail("the condition must hold one element, got " + shape_text(s.shape(0)));
  const HostTensor* fixed = s.inputs[0].bounded ? nullptr : s.constants[0];
  std::vector<Subgraph> branches;  // [then, else], or the one a fixed condition picks
  if (fixed) {
    branches.push_back(compile_branch(s, fixed->as_int64().at(0) != 0 ? "then_branch" : "else_branch"));
  } else {
    branches.push_back(compile_branch(s, "then_branch"));
    branches.push_back(compile_branch(s, "else_branch"));
  }
  const auto& first = branches[0].plan->output_descs();
  bool bounded = false;
  std::vector<std::int64_t> bound_elements;
  for (std::size_t o = 0; o < first.size(); ++o) {
    ValueDesc d = first[o];
    for (const Subgraph& b : branches) {
      const ValueDesc& other = b.plan->output_descs().at(o);
      if (other.dtype != d.dtype)
        s.fail("its branches give output " + std::to_string(o) + " as " + std::string(dtype_name(d.dtype)) +
               " and " + std::string(dtype_name(other.dtype)));
      bounded = bounded || other.bounded || other.shape != d.shape;
      if (other.shape.size() != d.shape.size()) {
        // Ranks differ (torchvision's RoI pooling returns [n] or [n, 1]): planned as the larger,
        // and what reads it is rebuilt for the shape that ran.
        if (other.numel() > d.numel()) d.shape = other.shape;
        continue;
      }
      for (std::size_t k = 0; k < d.shape.size(); ++k) d.shape[k] = std::max(d.shape[k], other.shape[k]);
    }
    s.set_output(o, d.dtype, d.shape);
    bound_elements.push_back(d.numel());
  }
  if (branches[0].plan->output_descs().size() !=
      (fixed ? first.size() : branches[1].plan->output_descs().size()))
    s.fail("its branches have different numbers of outputs");
  s.sets_output_shapes = bounded;
  const std::string label = s.node.label();
  auto views = std::make_shared<std::vector<TensorView>>();
  return [branches, fixed = fixed != nullptr, bound_elements, label, views](std::span<const TensorView> in,
                                                                            std::span<const TensorView> out) {
    const bool cond = fixed || *static_cast<const std::int8_t*>(in[0].data) != 0;
    const Subgraph& b = branches[fixed || cond ? 0 : 1];
    views->clear();
    for (const std::size_t i : b.captures) views->push_back(in[i]);
    b.plan->run(*views, {});
    for (std::size_t o = 0; o < out.size(); ++o) {
      if (!out[o].data) continue;  // an output nobody reads
      const Shape& shape = b.plan->output_shape(o);
      if (shape_numel(shape) > bound_elements[o])
        throw Error(label + ": output " + std::to_string(o) + " has shape " + shape_text(shape) +
                    ", more than the plan's bound of " + std::to_string(bound_elements[o]) + " elements");
      b.plan->copy_output(o, out[o].data);
      if (out[o].run_shape) *out[o].run_shape = shape;
    }
  };
}

// ---- Loop ----

// Node inputs: [M, cond, v_initial x N, captures x C]; body inputs: [iteration, cond, v x N,
// captures x C]; body outputs: [cond, v x N, scan x K]; node outputs: [v_final x N, scan x K].
Subgraph compile_body(OpSetup& s, const Graph& body, std::size_t carried) {
  std::vector<ValueDesc> leading{ValueDesc{DType::i64, {}}, ValueDesc{DType::i8, {}}};
  for (std::size_t j = 0; j < carried; ++j) {
    if (!s.inputs[2 + j].present) s.fail("loop-carried value " + std::to_string(j) + " has no initial value");
    leading.push_back(s.inputs[2 + j]);
  }
  return compile_subgraph(s, body, leading, 0, "body");
}

// What one Loop node keeps between runs: the carried values' two buffer sets and the body's
// input views, made at build time.
struct LoopState {
  std::int64_t iteration = 0;
  std::int8_t condition = 1, next_condition = 1;
  Shape scalar;
  std::vector<std::vector<std::byte>> carried[2];
  std::vector<Shape> carried_shapes[2];
  std::vector<TensorView> views;
};

Kernel build_loop(OpSetup& s) {
  const auto it = s.node.attributes.find("body");
  if (it == s.node.attributes.end() || it->second.kind != Attribute::Kind::graph)
    s.fail("has no 'body' subgraph");
  const Graph& body = *it->second.g;
  if (body.inputs.size() < 2 + body.captures)
    s.fail("its body takes " + std::to_string(body.inputs.size() - body.captures) +
           " input(s); it needs the iteration number and the condition first");
  const std::size_t carried = body.inputs.size() - body.captures - 2;
  if (s.count() != body.inputs.size())
    s.fail("its body reads " + std::to_string(carried) + " loop-carried and " +
           std::to_string(body.captures) + " outer value(s), the node passes " + std::to_string(s.count()) +
           " inputs");
  if (body.outputs.size() < 1 + carried)
    s.fail("its body returns " + std::to_string(body.outputs.size()) +
           " output(s); it needs the condition and " + std::to_string(carried) + " loop-carried value(s)");
  const std::size_t scans = body.outputs.size() - 1 - carried;

  // The trip count and the condition, when given (each an optional scalar input).
  const bool has_trip = s.has(0), has_condition = s.has(1);
  for (std::size_t i = 0; i < 2; ++i)
    if (s.has(i) && s.inputs[i].numel() != 1)
      s.fail(std::string(i == 0 ? "the trip count M" : "the condition") + " must hold one element, got " +
             shape_text(s.shape(i)));
  if (has_trip && s.inputs[0].dtype != DType::i64)
    s.fail("the trip count M must be INT64, got " + std::string(dtype_name(s.inputs[0].dtype)));
  if (has_condition && s.inputs[1].dtype != DType::i8)
    s.fail("the condition must be BOOL, got " + std::string(dtype_name(s.inputs[1].dtype)));
  const HostTensor* fixed_trip = has_trip && !s.inputs[0].bounded ? s.constants[0] : nullptr;
  const std::int64_t limit = s.max_loop_iterations;
  std::int64_t trip_bound = limit;
  if (fixed_trip) {
    const std::int64_t m = std::max<std::int64_t>(fixed_trip->as_int64().at(0), 0);
    if (!has_condition && m > limit)
      s.fail("runs " + std::to_string(m) + " iterations, more than the " + std::to_string(limit) +
             " allowed (--max-loop-iterations)");
    trip_bound = std::min(m, limit);
  }
  // A loop of a constant trip count and no condition runs exactly that many times.
  const bool exact = fixed_trip && !has_condition;

  Subgraph b = compile_body(s, body, carried);
  const auto& descs = b.plan->output_descs();
  if (descs[0].numel() != 1 || descs[0].dtype != DType::i8)
    s.fail("its body's condition output must be one BOOL, got " + std::string(dtype_name(descs[0].dtype)) +
           " " + shape_text(descs[0].shape));
  bool bounded = !exact;
  for (std::size_t j = 0; j < carried; ++j) {
    const ValueDesc& in = s.inputs[2 + j];
    const ValueDesc& out = descs[1 + j];
    const std::string name = "loop-carried value '" + body.inputs[2 + j].name + "'";
    if (out.dtype != in.dtype)
      s.fail(name + " enters as " + std::string(dtype_name(in.dtype)) + " and leaves an iteration as " +
             std::string(dtype_name(out.dtype)));
    if (out.shape != in.shape || (out.bounded && !in.bounded))
      s.fail(name + " enters as " + shape_text(in.shape) + " and leaves an iteration as " +
             shape_text(out.shape) + (out.bounded ? " (data-dependent)" : "") +
             ": only loops whose carried values keep their shape are supported");
    bounded = bounded || in.bounded;
    s.set_output(j, in.dtype, in.shape);
  }
  std::vector<std::size_t> scan_bytes;
  for (std::size_t k = 0; k < scans; ++k) {
    const ValueDesc& d = descs[1 + carried + k];
    if (d.bounded)
      s.fail("scan output " + std::to_string(k) + " has a data-dependent shape (at most " +
             shape_text(d.shape) + "): each iteration must give the same shape");
    Shape shape{trip_bound};
    shape.insert(shape.end(), d.shape.begin(), d.shape.end());
    s.set_output(carried + k, d.dtype, shape);
    scan_bytes.push_back(static_cast<std::size_t>(d.numel()) * dtype_size(d.dtype));
    constexpr double kMaxScanBytes = 1 << 30;
    if (static_cast<double>(scan_bytes.back()) * static_cast<double>(trip_bound) > kMaxScanBytes)
      s.fail("scan output " + std::to_string(k) + " planned for " + std::to_string(trip_bound) +
             " iterations would take " +
             std::to_string(scan_bytes.back() * static_cast<std::size_t>(trip_bound) >> 20) +
             " MiB: give a lower --max-loop-iterations");
  }
  s.sets_output_shapes = bounded;

  auto state = std::make_shared<LoopState>();
  for (auto side : {0, 1})
    for (std::size_t j = 0; j < carried; ++j) {
      state->carried[side].emplace_back(static_cast<std::size_t>(s.inputs[2 + j].numel()) *
                                        dtype_size(s.inputs[2 + j].dtype));
      state->carried_shapes[side].push_back(s.inputs[2 + j].shape);
    }
  state->views.resize(2 + carried + b.captures.size());
  std::vector<DType> carried_types;
  for (std::size_t j = 0; j < carried; ++j) carried_types.push_back(s.inputs[2 + j].dtype);
  const std::string label = s.node.label();
  return [b, state, carried, scans, scan_bytes, carried_types, has_trip, has_condition, limit, label](
             std::span<const TensorView> in, std::span<const TensorView> out) {
    LoopState& st = *state;
    const std::int64_t trip = has_trip ? *static_cast<const std::int64_t*>(in[0].data) : 0;
    bool go = !has_condition || *static_cast<const std::int8_t*>(in[1].data) != 0;
    int side = 0;
    for (std::size_t j = 0; j < carried; ++j) {
      st.carried_shapes[0][j] = *in[2 + j].shape;
      std::memcpy(st.carried[0][j].data(), in[2 + j].data,
                  static_cast<std::size_t>(shape_numel(*in[2 + j].shape)) * dtype_size(carried_types[j]));
    }
    std::int64_t t = 0;
    for (; (!has_trip || t < trip) && go; ++t) {
      if (t == limit)
        throw Error(label + ": still running after " + std::to_string(limit) +
                    " iterations (--max-loop-iterations sets the bound)");
      st.iteration = t;
      st.condition = go ? 1 : 0;
      st.views[0] = TensorView{DType::i64, &st.scalar, &st.iteration};
      st.views[1] = TensorView{DType::i8, &st.scalar, &st.condition};
      for (std::size_t j = 0; j < carried; ++j)
        st.views[2 + j] =
            TensorView{carried_types[j], &st.carried_shapes[side][j], st.carried[side][j].data()};
      for (std::size_t c = 0; c < b.captures.size(); ++c) st.views[2 + carried + c] = in[b.captures[c]];
      b.plan->run(st.views, {});
      b.plan->copy_output(0, &st.next_condition);
      for (std::size_t j = 0; j < carried; ++j) {
        st.carried_shapes[1 - side][j] = b.plan->output_shape(1 + j);
        b.plan->copy_output(1 + j, st.carried[1 - side][j].data());
      }
      for (std::size_t k = 0; k < scans; ++k)
        if (out[carried + k].data)
          b.plan->copy_output(1 + carried + k, static_cast<std::byte*>(out[carried + k].data) +
                                                   static_cast<std::size_t>(t) * scan_bytes[k]);
      side = 1 - side;
      go = !has_condition || st.next_condition != 0;
    }
    for (std::size_t j = 0; j < carried; ++j) {
      if (!out[j].data) continue;
      std::memcpy(
          out[j].data, st.carried[side][j].data(),
          static_cast<std::size_t>(shape_numel(st.carried_shapes[side][j])) * dtype_size(carried_types[j]));
      if (out[j].run_shape) *out[j].run_shape = st.carried_shapes[side][j];
    }
    for (std::size_t k = 0; k < scans; ++k) {
      if (!out[carried + k].run_shape) continue;
      Shape shape = *out[carried + k].shape;
      shape[0] = t;
      *out[carried + k].run_shape = shape;
    }
  };
}

const OpEntry kOps[] = {
    {"If", build_if},
    {"Loop", build_loop},
};

}  // namespace

std::span<const OpEntry> control_flow_ops() { return kOps; }

}  // namespace cpudl::infer
