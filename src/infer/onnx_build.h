// Building ONNX protobuf messages: tensors, nodes and their attributes. Shared by the writers of
// ONNX files (quantizer.cpp edits a model, onnx_export.cpp makes one from a cpudl model).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cpudl::infer {

inline onnx::TensorProto make_tensor(const std::string& name, int type, const std::vector<std::int64_t>& dims,
                                     const void* data, std::size_t bytes) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (std::int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(static_cast<const char*>(data), bytes));
  return t;
}

inline onnx::NodeProto make_node(const std::string& op, const std::string& name,
                                 std::vector<std::string> inputs, std::vector<std::string> outputs) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : inputs) n.add_input(i);
  for (auto& o : outputs) n.add_output(o);
  return n;
}

inline void set_int_attribute(onnx::NodeProto& n, const char* name, std::int64_t value) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

inline void set_ints_attribute(onnx::NodeProto& n, const char* name,
                               const std::vector<std::int64_t>& values) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (std::int64_t v : values) a->add_ints(v);
}

inline void set_float_attribute(onnx::NodeProto& n, const char* name, float value) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

}  // namespace cpudl::infer
