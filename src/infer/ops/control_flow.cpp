// If: each branch is a plan of its own (plan.h), compiled once for the shapes its If reads, and
// run on the branch the condition picks. The loader made every value a branch reads from outside
// into an input of the If (Graph::captures), so here they arrive as ordinary inputs; those known at
// plan time are baked into the branches as constants, so the branches fold and fuse like any graph.
// A branch's outputs may differ in size between branches (torchvision's batched_nms returns an
// empty tensor in one): the If is then planned at the larger size and reports what ran.
#include <cstring>

#include "infer/op_registry.h"
#include "infer/plan.h"

namespace cpudl::infer {
namespace {

struct Branch {
  std::shared_ptr<Plan> plan;
  std::vector<std::size_t> inputs;  // which If inputs feed the plan's inputs, in order
};

Branch compile_branch(OpSetup& s, const char* name) {
  const auto it = s.node.attributes.find(name);
  if (it == s.node.attributes.end() || it->second.kind != Attribute::Kind::graph)
    s.fail(std::string("has no '") + name + "' subgraph");
  const Graph& branch = *it->second.g;
  const std::size_t captured = branch.inputs.size();
  if (captured + 1 != s.count())
    s.fail(std::string(name) + " reads " + std::to_string(captured) + " outer value(s), the node passes " +
           std::to_string(s.count() - 1));
  Graph g = branch;
  g.inputs.clear();
  Branch b;
  std::vector<Shape> shapes;
  std::vector<bool> bounded;
  for (std::size_t i = 0; i < captured; ++i) {
    const ValueDesc& d = s.inputs[i + 1];
    const HostTensor* known = s.constants[i + 1];
    if (known && !d.bounded) {  // a value fixed at plan time (not one computed at a bound)
      g.constants[branch.inputs[i].name] = std::make_shared<HostTensor>(*known);
      continue;
    }
    g.inputs.push_back(ValueInfo{branch.inputs[i].name, d.dtype, {}});
    shapes.push_back(d.shape);
    bounded.push_back(d.bounded);
    b.inputs.push_back(i + 1);
  }
  OptimizerReport report;
  try {
    b.plan = std::make_shared<Plan>(g, shapes, report, true, bounded);
  } catch (const Error& e) {
    s.fail(std::string(name) + ": " + e.what());
  }
  return b;
}

Kernel build_if(OpSetup& s) {
  if (s.count() < 1 || !s.has(0)) s.fail("has no condition input");
  if (s.inputs[0].numel() != 1) s.fail("the condition must hold one element, got " + shape_text(s.shape(0)));
  const HostTensor* fixed = s.inputs[0].bounded ? nullptr : s.constants[0];
  std::vector<Branch> branches;  // [then, else], or the one a fixed condition picks
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
    for (const Branch& b : branches) {
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
    const Branch& b = branches[fixed || cond ? 0 : 1];
    views->clear();
    for (const std::size_t i : b.inputs) views->push_back(in[i]);
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

const OpEntry kOps[] = {
    {"If", build_if},
};

}  // namespace

std::span<const OpEntry> control_flow_ops() { return kOps; }

}  // namespace cpudl::infer
