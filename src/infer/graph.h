// The inference runtime's graph: what the ONNX loader produces and the optimiser rewrites. Values
// are named (ONNX's own names); constants (initializers, Constant nodes, folded results) are
// host tensors; a node keeps ONNX's operator name, inputs, outputs and attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpudl/tensor.h"

namespace cpudl::infer {

// Element types the runtime computes with: cpudl's DType (ONNX BOOL is stored as i8 holding 0 or
// 1); sizes, counts and shape text are the tensor layer's dtype_size, shape_numel and shape_text.

// A constant tensor: owns its bytes (contiguous, row-major, little-endian).
struct HostTensor {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<std::byte> bytes;

  std::int64_t numel() const { return shape_numel(shape); }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  static HostTensor zeros(DType dtype, const Shape& shape);
  // Values as int64 (i64, i32 or i8 tensors): shape arguments, axes, indices.
  std::vector<std::int64_t> as_int64() const;
  std::vector<float> as_float() const;  // f32 (or integer) values as float
};

struct Graph;

struct Attribute {
  enum class Kind { none, i, f, s, t, ints, floats, strings, graph } kind = Kind::none;
  std::int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<HostTensor> t;
  // A subgraph (If's branches). The loader gives it one input per value it reads from the scopes
  // around it, in the order the node lists them after its own inputs (see Graph::captures).
  std::shared_ptr<const Graph> g;
};

struct Node {
  std::string name, op;                      // op: ONNX operator type ("Conv"), or a fused one ("FusedConv")
  std::vector<std::string> inputs, outputs;  // "" marks an omitted optional input
  std::map<std::string, Attribute> attributes;

  bool has(const std::string& key) const { return attributes.count(key) != 0; }
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  float get_float(const std::string& key, float fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::int64_t> get_ints(const std::string& key, std::vector<std::int64_t> fallback = {}) const;
  std::string label() const;  // "Conv node 'conv1'" for error messages
};

// A graph input or output: name, element type, and its declared shape (-1 for a symbolic or
// unknown dimension such as a dynamic batch).
struct ValueInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

struct Graph {
  std::vector<Node> nodes;  // topologically ordered
  std::map<std::string, std::shared_ptr<const HostTensor>> constants;
  std::vector<ValueInfo> inputs, outputs;  // inputs exclude initializers
  std::int64_t opset = 0;
  std::string producer;                         // "pytorch 1.13.1"
  std::map<std::string, std::string> metadata;  // the model's metadata_props
  // A subgraph's reads from the scopes around it (ONNX's outer-scope values). The node that owns
  // the subgraph lists them as extra inputs after its own, and `inputs` holds them in that order
  // (element types left to the plan), so the optimiser, which rewrites names in the outer graph,
  // and the planner see every read as an ordinary edge.
  std::size_t captures = 0;
};

}  // namespace cpudl::infer
