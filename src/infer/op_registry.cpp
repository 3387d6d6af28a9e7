// The operator registry's lookup and the checks every build function shares.
#include "infer/op_registry.h"

#include <unordered_map>

#include "infer/op_list.h"
#include "tensor/strided.h"

namespace cpudl::infer {

const HostTensor& OpSetup::constant(std::size_t i, const char* what) const {
  if (!has(i)) fail(std::string("input '") + what + "' is missing");
  if (!constants[i])
    fail(std::string("input '") + what +
         "' must be known before the run (a constant, or computed from shapes only)");
  return *constants[i];
}

void OpSetup::fail(const std::string& what) const { throw Error(node.label() + ": " + what); }

void OpSetup::require_inputs(std::size_t min, std::size_t max) const {
  std::size_t present = inputs.size();
  while (present > 0 && !inputs[present - 1].present) --present;
  if (present < min || inputs.size() > max)
    fail("has " + std::to_string(inputs.size()) + " inputs, expected " + std::to_string(min) +
         (max != min ? " to " + std::to_string(max) : ""));
  for (std::size_t i = 0; i < min; ++i)
    if (!inputs[i].present) fail("input " + std::to_string(i) + " is required");
}

void OpSetup::require_f32(std::size_t i) const {
  if (inputs.at(i).dtype != DType::f32)
    fail("input " + std::to_string(i) + " is " + std::string(dtype_name(inputs[i].dtype)) +
         ", expected FLOAT");
}

void OpSetup::require_present_f32() const {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].present) require_f32(i);
}

std::int64_t normalize_axis(const OpSetup& setup, std::int64_t axis, std::int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    setup.fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
               std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const OpSetup& setup, const Shape& a, const Shape& b) {
  try {
    return cpudl::broadcast_shapes(a, b, "broadcast");  // NumPy's rules, the tensor layer's one copy
  } catch (const Error& e) {
    setup.fail(e.what());
  }
}

BuildFn find_op(const std::string& op) {
  static const std::unordered_map<std::string, BuildFn> registry = [] {
    std::unordered_map<std::string, BuildFn> r;
    for (auto table : {elementwise_ops(), dense_ops(), shape_ops(), normalization_ops(), quantization_ops(),
                       reduction_ops(), detection_ops(), control_flow_ops(), resize_ops(),
                       elementwise_nary_ops(), indexing_ops(), roi_align_ops()})
      for (const OpEntry& e : table) r.emplace(e.name, e.build);
        // Every operator the loader accepts must be executable.
#define CPUDL_CHECK_OP(name) \
  if (!r.count(#name)) throw Error("internal: operator " #name " has no implementation");
    CPUDL_ONNX_OPS(CPUDL_CHECK_OP)
#undef CPUDL_CHECK_OP
    return r;
  }();
  const auto it = registry.find(op);
  return it == registry.end() ? nullptr : it->second;
}

}  // namespace cpudl::infer
