// ONNX ModelProto -> Graph. Nothing in the file is trusted: every count, size, offset and name is
// checked before use, and errors name the file and the tensor, node or field at fault.
#include "infer/onnx_loader.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <unordered_map>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "infer/op_list.h"
#include "io/file_kind.h"

namespace cpudl::infer {
namespace {

constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

class Loader {
 public:
  Loader(std::string file, std::filesystem::path dir) : file_(std::move(file)), dir_(std::move(dir)) {}

  Graph load(const std::string& bytes) {
    onnx::ModelProto model;
    if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      fail("larger than 2 GiB: store the weights as external data");
    // Another format cpudl reads, told by its first bytes: a user who passes one to `run` or
    // `info` learns which command takes it instead of reading a protobuf error.
    if (const io::FileKind kind = io::file_kind(std::string_view(bytes).substr(0, 16), bytes.size());
        kind != io::FileKind::unknown && kind != io::FileKind::onnx)
      fail(io::file_kind_description(kind) + ", not an ONNX model");
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      fail("not a valid ONNX model (protobuf parsing failed: truncated or corrupted file?)");
    if (!model.has_graph()) fail("the model has no graph");
    if (model.ir_version() < 3)
      fail("ir_version " + std::to_string(model.ir_version()) + " is not supported (need 3 or later)");
    Graph graph;
    for (const auto& p : model.metadata_props()) graph.metadata[p.key()] = p.value();
    graph.producer =
        model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
    for (const auto& import : model.opset_import()) {
      if (import.domain().empty() || import.domain() == "ai.onnx") graph.opset = import.version();
    }
    if (graph.opset == 0) fail("no opset_import for the default ONNX domain");
    if (graph.opset < kMinOpset || graph.opset > kMaxOpset)
      fail("opset " + std::to_string(graph.opset) + " is not supported (cpudl runs opsets " +
           std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
    opset_ = graph.opset;
    read_graph(model.graph(), graph);
    return graph;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(file_ + ": " + what); }

  static DType element_type(int onnx_type, bool* ok) {
    *ok = true;
    switch (onnx_type) {
      case onnx::TensorProto::FLOAT:
        return DType::f32;
      case onnx::TensorProto::INT64:
        return DType::i64;
      case onnx::TensorProto::INT32:
        return DType::i32;
      case onnx::TensorProto::BOOL:
      case onnx::TensorProto::INT8:
        return DType::i8;
      case onnx::TensorProto::UINT8:
        return DType::u8;
      case onnx::TensorProto::BFLOAT16:
        return DType::bf16;
      default:
        *ok = false;
        return DType::f32;
    }
  }
  static std::string type_name(int onnx_type) {
    return onnx::TensorProto::DataType_IsValid(onnx_type)
               ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnx_type))
               : "type " + std::to_string(onnx_type);
  }

  HostTensor read_tensor(const onnx::TensorProto& t, const std::string& what) const {
    HostTensor out;
    bool ok = false;
    out.dtype = element_type(t.data_type(), &ok);
    const std::string name = what + " '" + t.name() + "'";
    if (!ok)
      fail(name + ": element type " + type_name(t.data_type()) +
           " is not supported (FLOAT, BFLOAT16, INT64, INT32, INT8, UINT8, BOOL are)");
    std::int64_t n = 1;
    for (std::int64_t d : t.dims()) {
      if (d < 0) fail(name + ": negative dimension " + std::to_string(d));
      if (d > 0 && n > kMaxElements / d) fail(name + ": shape too large");
      n *= d;
      out.shape.push_back(d);
    }
    const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(out.dtype);
    // Sizes are checked against the data actually present before anything is allocated: a
    // corrupted shape must not make the loader reserve terabytes.
    auto size_error = [&](std::size_t found) {
      fail(name + ": data holds " + std::to_string(found) + " bytes but shape " + shape_text(out.shape) +
           " of " + std::string(dtype_name(out.dtype)) + " needs " + std::to_string(bytes));
    };
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      read_external(t, name, bytes, out.bytes);
    } else if (t.has_raw_data()) {
      if (t.raw_data().size() != bytes) size_error(t.raw_data().size());
      out.bytes.resize(bytes);
      if (bytes) std::memcpy(out.bytes.data(), t.raw_data().data(), bytes);
    } else if (out.dtype == DType::f32) {
      if (static_cast<std::size_t>(t.float_data_size()) * 4 != bytes) size_error(t.float_data_size() * 4ull);
      out.bytes.resize(bytes);
      if (bytes) std::memcpy(out.bytes.data(), t.float_data().data(), bytes);
    } else if (out.dtype == DType::i64) {
      if (static_cast<std::size_t>(t.int64_data_size()) * 8 != bytes) size_error(t.int64_data_size() * 8ull);
      out.bytes.resize(bytes);
      if (bytes) std::memcpy(out.bytes.data(), t.int64_data().data(), bytes);
    } else {  // INT32, INT8, UINT8, BOOL and BFLOAT16 (its bits) travel in int32_data, one per entry
      if (t.int32_data_size() != n) size_error(t.int32_data_size() * dtype_size(out.dtype));
      out.bytes.resize(bytes);
      for (std::int64_t i = 0; i < n; ++i) {
        if (out.dtype == DType::bf16)
          out.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(t.int32_data(static_cast<int>(i)));
        else if (out.dtype == DType::i32)
          out.data<std::int32_t>()[i] = t.int32_data(static_cast<int>(i));
        else if (out.dtype == DType::u8)
          out.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(t.int32_data(static_cast<int>(i)));
        else
          out.data<std::int8_t>()[i] = static_cast<std::int8_t>(t.int32_data(static_cast<int>(i)));
      }
    }
    return out;
  }

  void read_external(const onnx::TensorProto& t, const std::string& name, std::size_t bytes,
                     std::vector<std::byte>& out) const {
    std::string location;
    std::int64_t offset = 0, length = -1;
    for (const auto& entry : t.external_data()) {
      try {
        if (entry.key() == "location")
          location = entry.value();
        else if (entry.key() == "offset")
          offset = std::stoll(entry.value());
        else if (entry.key() == "length")
          length = std::stoll(entry.value());
      } catch (const std::exception&) {
        fail(name + ": external data field '" + entry.key() + "' is not a number: '" + entry.value() + "'");
      }
    }
    const std::filesystem::path rel(location);
    if (location.empty()) fail(name + ": external data without a location");
    if (rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const auto& part) { return part == ".."; }))
      fail(name + ": external data location '" + location +
           "' must be a relative path inside the model's folder");
    if (offset < 0) fail(name + ": negative external data offset");
    if (length >= 0 && static_cast<std::size_t>(length) != bytes)
      fail(name + ": external data length " + std::to_string(length) + " disagrees with its shape (" +
           std::to_string(bytes) + " bytes)");
    const std::filesystem::path path = dir_ / rel;
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(name + ": cannot open external data file " + path.string());
    in.seekg(0, std::ios::end);
    const std::int64_t file_size = in.tellg();
    if (offset > file_size || static_cast<std::int64_t>(bytes) > file_size - offset)
      fail(name + ": external data range [" + std::to_string(offset) + ", " +
           std::to_string(offset + static_cast<std::int64_t>(bytes)) + ") lies beyond the end of " +
           path.string() + " (" + std::to_string(file_size) + " bytes)");
    out.resize(bytes);
    in.seekg(offset);
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (!in) fail(name + ": read error in " + path.string());
  }

  ValueInfo read_value_info(const onnx::ValueInfoProto& v, const std::string& what) const {
    ValueInfo info;
    info.name = v.name();
    if (info.name.empty()) fail("a " + what + " has no name");
    if (!v.has_type() && what == "graph output") return info;  // outputs may leave their type to inference
    if (!v.has_type() || !v.type().has_tensor_type()) fail(what + " '" + v.name() + "' is not a tensor");
    const auto& tt = v.type().tensor_type();
    bool ok = false;
    info.dtype = element_type(tt.elem_type(), &ok);
    if (!ok)
      fail(what + " '" + v.name() + "': element type " + type_name(tt.elem_type()) + " is not supported");
    if (tt.has_shape()) {
      for (const auto& d : tt.shape().dim()) info.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    return info;
  }

  Attribute read_attribute(const onnx::AttributeProto& a, const std::string& node) const {
    Attribute out;
    using A = onnx::AttributeProto;
    switch (a.type()) {
      case A::INT:
        out.kind = Attribute::Kind::i;
        out.i = a.i();
        break;
      case A::FLOAT:
        out.kind = Attribute::Kind::f;
        out.f = a.f();
        break;
      case A::STRING:
        out.kind = Attribute::Kind::s;
        out.s = a.s();
        break;
      case A::TENSOR:
        out.kind = Attribute::Kind::t;
        out.t = std::make_shared<HostTensor>(read_tensor(a.t(), node + " attribute " + a.name()));
        break;
      case A::INTS:
        out.kind = Attribute::Kind::ints;
        out.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case A::FLOATS:
        out.kind = Attribute::Kind::floats;
        out.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case A::STRINGS:
        out.kind = Attribute::Kind::strings;
        out.strings.assign(a.strings().begin(), a.strings().end());
        break;
      case A::GRAPH: {
        out.kind = Attribute::Kind::graph;
        auto sub = std::make_shared<Graph>();
        sub->opset = opset_;
        std::set<std::string> captured;
        read_graph(a.g(), *sub, &captured);
        for (const auto& name : captured) sub->inputs.push_back(ValueInfo{name, DType::f32, {}});
        sub->captures = captured.size();
        out.g = std::move(sub);
        break;
      }
      default:
        fail(node + ": attribute '" + a.name() + "' has an unsupported type (sparse tensors, graph lists)");
    }
    return out;
  }

  // `captured` is null for the model's graph; for a subgraph, it collects the names its nodes read
  // that it does not define (values of the scopes around it).
  void read_graph(const onnx::GraphProto& g, Graph& graph, std::set<std::string>* captured = nullptr) const {
    if (++depth_ > kMaxSubgraphDepth) fail("subgraphs nest deeper than " + std::to_string(kMaxSubgraphDepth));
    for (const auto& t : g.initializer()) {
      if (t.name().empty()) fail("an initializer has no name");
      if (graph.constants.count(t.name())) fail("initializer '" + t.name() + "' is defined twice");
      graph.constants[t.name()] = std::make_shared<HostTensor>(read_tensor(t, "initializer"));
    }
    if (g.sparse_initializer_size() > 0) fail("sparse initializers are not supported");
    for (const auto& v : g.input()) {
      if (!graph.constants.count(v.name())) graph.inputs.push_back(read_value_info(v, "graph input"));
    }
    for (const auto& v : g.output()) graph.outputs.push_back(read_value_info(v, "graph output"));
    if (graph.outputs.empty()) fail("the graph has no outputs");

    std::vector<Node> nodes;
    std::vector<std::string> unsupported;
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      Node node;
      node.op = n.op_type();
      node.name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
      node.inputs.assign(n.input().begin(), n.input().end());
      node.outputs.assign(n.output().begin(), n.output().end());
      const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
      if (!default_domain || !is_supported_op(node.op.c_str())) {
        unsupported.push_back(node.op + (default_domain ? "" : " (domain " + n.domain() + ")") +
                              " in node '" + node.name + "'");
        continue;
      }
      for (const auto& a : n.attribute()) node.attributes[a.name()] = read_attribute(a, node.label());
      add_subgraph_captures(node);
      nodes.push_back(std::move(node));
    }
    if (!unsupported.empty()) {
      std::string list;
      for (const auto& u : unsupported) list += (list.empty() ? "" : "; ") + u;
      fail(std::to_string(unsupported.size()) + " unsupported operator(s) at opset " +
           std::to_string(graph.opset) + ": " + list);
    }
    graph.nodes = topological_order(std::move(nodes), graph, captured);
    --depth_;
  }

  // The union of what the node's subgraphs read from outside becomes the node's extra inputs, and
  // every subgraph gets that same input list, so the branches of one If agree by position.
  static void add_subgraph_captures(Node& node) {
    std::set<std::string> names;
    for (const auto& [_, a] : node.attributes)
      if (a.kind == Attribute::Kind::graph)
        for (std::size_t i = a.g->inputs.size() - a.g->captures; i < a.g->inputs.size(); ++i)
          names.insert(a.g->inputs[i].name);
    if (names.empty()) return;
    for (auto& [_, a] : node.attributes) {
      if (a.kind != Attribute::Kind::graph) continue;
      auto sub = std::make_shared<Graph>(*a.g);
      sub->inputs.resize(sub->inputs.size() - sub->captures);
      for (const auto& name : names) sub->inputs.push_back(ValueInfo{name, DType::f32, {}});
      sub->captures = names.size();
      a.g = std::move(sub);
    }
    node.inputs.insert(node.inputs.end(), names.begin(), names.end());
  }

  // Kahn's algorithm over value names: reports undefined inputs and cycles by node.
  std::vector<Node> topological_order(std::vector<Node> nodes, const Graph& graph,
                                      std::set<std::string>* captured) const {
    std::unordered_map<std::string, std::size_t> producer;
    std::set<std::string> available;
    for (const auto& [name, _] : graph.constants) available.insert(name);
    for (const auto& v : graph.inputs) available.insert(v.name);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      for (const auto& out : nodes[i].outputs) {
        if (out.empty()) continue;
        if (available.count(out) || !producer.emplace(out, i).second)
          fail(nodes[i].label() + ": output '" + out + "' is defined more than once");
      }
    }
    std::vector<std::size_t> waiting(nodes.size(), 0);
    std::unordered_map<std::string, std::vector<std::size_t>> consumers;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      for (const auto& in : nodes[i].inputs) {
        if (in.empty() || available.count(in)) continue;
        if (!producer.count(in)) {
          if (captured) {  // a subgraph reading its enclosing scope
            captured->insert(in);
            continue;
          }
          fail(nodes[i].label() + ": input '" + in + "' is not defined by any node, input or initializer");
        }
        ++waiting[i];
        consumers[in].push_back(i);
      }
    }
    std::vector<std::size_t> ready, order;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (waiting[i] == 0) ready.push_back(i);
    // Keep the file's order among ready nodes (a min-heap by index) so that plans are stable.
    auto by_index = std::greater<std::size_t>();
    std::make_heap(ready.begin(), ready.end(), by_index);
    while (!ready.empty()) {
      std::pop_heap(ready.begin(), ready.end(), by_index);
      const std::size_t i = ready.back();
      ready.pop_back();
      order.push_back(i);
      for (const auto& out : nodes[i].outputs) {
        for (std::size_t c : consumers[out]) {
          if (--waiting[c] == 0) {
            ready.push_back(c);
            std::push_heap(ready.begin(), ready.end(), by_index);
          }
        }
        consumers[out].clear();
      }
    }
    if (order.size() != nodes.size()) {
      for (std::size_t i = 0; i < nodes.size(); ++i)
        if (waiting[i] > 0) fail("the graph has a cycle through " + nodes[i].label());
    }
    for (const auto& out : graph.outputs) {
      if (producer.count(out.name) || available.count(out.name)) continue;
      if (captured)  // a branch may return an outer value as it is
        captured->insert(out.name);
      else
        fail("graph output '" + out.name + "' is not produced by any node");
    }
    std::vector<Node> sorted;
    sorted.reserve(nodes.size());
    for (std::size_t i : order) sorted.push_back(std::move(nodes[i]));
    return sorted;
  }

  static constexpr int kMaxSubgraphDepth = 16;  // a hostile file must not exhaust the stack
  std::string file_;
  std::filesystem::path dir_;
  std::int64_t opset_ = 0;
  mutable int depth_ = 0;
};

}  // namespace

bool is_supported_op(const char* op) {
  static const std::set<std::string> ops = {
#define CPUDL_OP_NAME(name) #name,
      CPUDL_ONNX_OPS(CPUDL_OP_NAME)
#undef CPUDL_OP_NAME
  };
  return ops.count(op) != 0;
}

Graph parse_onnx(const std::string& bytes, const std::string& name_for_errors,
                 const std::filesystem::path& external_data_dir) {
  return Loader(name_for_errors, external_data_dir).load(bytes);
}

Graph load_onnx(const std::filesystem::path& path) {
  return parse_onnx(io::read_file(path), path.string(), path.parent_path());
}

}  // namespace cpudl::infer
