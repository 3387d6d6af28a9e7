// ONNX recipes of the zoo architectures (onnx_export.h). Each mirrors its model's forward in
// src/nn/zoo.cpp, layer for layer; parameter names are the state dict's.
#include "infer/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <set>

#include "cpudl/error.h"
#include "infer/onnx_build.h"

namespace cpudl::infer {
namespace {

class GraphWriter {
 public:
  GraphWriter(const ZooModel& model, onnx::GraphProto& graph) : model_(model), graph_(graph) {
    for (const auto& [name, t] : model.weights) weights_[name] = &t;
  }

  // The initializer of a state-dict tensor (added once), checked for its rank.
  std::string weight(const std::string& name, std::size_t rank) {
    const auto it = weights_.find(name);
    if (it == weights_.end())
      throw Error(model_.architecture + ": the state dict has no tensor '" + name + "' to export");
    const Tensor& t = *it->second;
    if (t.dim() != static_cast<std::int64_t>(rank) || t.dtype() != DType::f32)
      throw Error(model_.architecture + ": tensor '" + name + "' is " + std::string(dtype_name(t.dtype())) +
                  " " + shape_text(t.shape()) + ", expected f32 of rank " + std::to_string(rank));
    if (added_.insert(name).second) {
      const Tensor c = t.contiguous();
      *graph_.add_initializer() = make_tensor(name, onnx::TensorProto::FLOAT, c.shape(), c.data(),
                                              static_cast<std::size_t>(c.numel()) * sizeof(float));
    }
    return name;
  }
  bool has(const std::string& name) const { return weights_.count(name) != 0; }

  // A node with one output named after the layer ("/layer1.0/conv1/Conv"), as PyTorch names them.
  onnx::NodeProto& node(const std::string& op, const std::string& scope, std::vector<std::string> inputs) {
    std::string name = "/" + scope + "/" + op;
    for (int i = 1; !names_.insert(name).second; ++i) name = "/" + scope + "/" + op + "_" + std::to_string(i);
    onnx::NodeProto& n = *graph_.add_node();
    n = make_node(op, name, std::move(inputs), {name + "_output_0"});
    return n;
  }
  static const std::string& out(const onnx::NodeProto& n) { return n.output(0); }

  std::string conv(const std::string& x, const std::string& prefix, std::int64_t stride, std::int64_t pad) {
    std::vector<std::string> in{x, weight(prefix + ".weight", 4)};
    const Tensor& w = *weights_.at(prefix + ".weight");
    if (has(prefix + ".bias")) in.push_back(weight(prefix + ".bias", 1));
    onnx::NodeProto& n = node("Conv", prefix, in);
    set_ints_attribute(n, "kernel_shape", {w.size(2), w.size(3)});
    set_ints_attribute(n, "strides", {stride, stride});
    set_ints_attribute(n, "pads", {pad, pad, pad, pad});
    set_ints_attribute(n, "dilations", {1, 1});
    set_int_attribute(n, "group", 1);
    return out(n);
  }
  std::string batch_norm(const std::string& x, const std::string& prefix) {
    onnx::NodeProto& n = node("BatchNormalization", prefix,
                              {x, weight(prefix + ".weight", 1), weight(prefix + ".bias", 1),
                               weight(prefix + ".running_mean", 1), weight(prefix + ".running_var", 1)});
    set_float_attribute(n, "epsilon", 1e-5f);  // nn::BatchNorm2d's and PyTorch's default
    set_float_attribute(n, "momentum", 0.9f);  // ONNX's convention: 1 - PyTorch's 0.1
    return out(n);
  }
  std::string relu(const std::string& x, const std::string& scope) { return out(node("Relu", scope, {x})); }
  std::string max_pool(const std::string& x, const std::string& scope, std::int64_t k, std::int64_t s,
                       std::int64_t p) {
    onnx::NodeProto& n = node("MaxPool", scope, {x});
    set_ints_attribute(n, "kernel_shape", {k, k});
    set_ints_attribute(n, "strides", {s, s});
    set_ints_attribute(n, "pads", {p, p, p, p});
    return out(n);
  }
  std::string flatten(const std::string& x, const std::string& scope) {
    onnx::NodeProto& n = node("Flatten", scope, {x});
    set_int_attribute(n, "axis", 1);
    return out(n);
  }
  // nn::Linear: y = x W^T + b
  std::string linear(const std::string& x, const std::string& prefix) {
    onnx::NodeProto& n =
        node("Gemm", prefix, {x, weight(prefix + ".weight", 2), weight(prefix + ".bias", 1)});
    set_float_attribute(n, "alpha", 1.0f);
    set_float_attribute(n, "beta", 1.0f);
    set_int_attribute(n, "transB", 1);
    return out(n);
  }
  std::string add(const std::string& a, const std::string& b, const std::string& scope) {
    return out(node("Add", scope, {a, b}));
  }
  std::string global_average_pool(const std::string& x, const std::string& scope) {
    return out(node("GlobalAveragePool", scope, {x}));
  }

 private:
  const ZooModel& model_;
  onnx::GraphProto& graph_;
  std::map<std::string, const Tensor*> weights_;
  std::set<std::string> added_, names_;
};

std::string simplecnn(GraphWriter& g, const std::string& x) {
  std::string h = g.relu(g.conv(x, "conv1", 1, 0), "relu");
  return g.linear(g.flatten(h, "flatten"), "fc");
}

std::string lenet5(GraphWriter& g, const std::string& x) {
  std::string h = g.relu(g.max_pool(g.conv(x, "conv1", 1, 2), "pool1", 2, 2, 0), "relu1");
  h = g.relu(g.max_pool(g.conv(h, "conv2", 1, 0), "pool2", 2, 2, 0), "relu2");
  h = g.flatten(h, "flatten");
  h = g.relu(g.linear(h, "fc1"), "fc1");
  h = g.relu(g.linear(h, "fc2"), "fc2");
  return g.linear(h, "fc3");
}

std::string mlp(GraphWriter& g, const std::string& x) {
  std::string h = g.flatten(x, "flatten");
  h = g.relu(g.linear(h, "fc1"), "fc1");
  h = g.relu(g.linear(h, "fc2"), "fc2");
  return g.linear(h, "fc3");
}

std::string resnet18(GraphWriter& g, const std::string& x, bool cifar_stem) {
  std::string h =
      g.relu(g.batch_norm(g.conv(x, "conv1", cifar_stem ? 1 : 2, cifar_stem ? 1 : 3), "bn1"), "relu");
  if (!cifar_stem) h = g.max_pool(h, "maxpool", 3, 2, 1);
  for (int stage = 1; stage <= 4; ++stage)
    for (int block = 0; block < 2; ++block) {
      const std::string p = "layer" + std::to_string(stage) + "." + std::to_string(block);
      const std::int64_t stride = stage > 1 && block == 0 ? 2 : 1;
      std::string y = g.relu(g.batch_norm(g.conv(h, p + ".conv1", stride, 1), p + ".bn1"), p + ".relu1");
      y = g.batch_norm(g.conv(y, p + ".conv2", 1, 1), p + ".bn2");
      // The model has the projection where the block changes stride or width (zoo.cpp, BasicBlock)
      const std::string shortcut =
          g.has(p + ".downsample.0.weight")
              ? g.batch_norm(g.conv(h, p + ".downsample.0", stride, 0), p + ".downsample.1")
              : h;
      h = g.relu(g.add(y, shortcut, p), p + ".relu2");
    }
  return g.linear(g.flatten(g.global_average_pool(h, "avgpool"), "flatten"), "fc");
}

void set_shape(onnx::ValueInfoProto& v, const std::string& name, const Shape& dims) {
  v.set_name(name);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = t->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  for (std::int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

}  // namespace

std::string export_zoo_onnx(const ZooModel& model, const std::string& producer_version) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);  // what opset 17 asks for (ONNX 1.12)
  proto.set_producer_name("cpudl");
  proto.set_producer_version(producer_version);
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  for (const auto& [key, value] : model.metadata) {
    auto* p = proto.add_metadata_props();
    p->set_key("cpudl." + key);
    p->set_value(value);
  }
  onnx::GraphProto& graph = *proto.mutable_graph();
  graph.set_name(model.architecture);
  set_shape(*graph.add_input(), "input", model.input_shape);
  GraphWriter g(model, graph);
  std::string y;
  if (model.architecture == "simplecnn")
    y = simplecnn(g, "input");
  else if (model.architecture == "lenet5")
    y = lenet5(g, "input");
  else if (model.architecture == "mlp")
    y = mlp(g, "input");
  else if (model.architecture == "resnet18")  // the stem load_model_file builds for this input
    y = resnet18(g, "input", model.input_shape.size() == 3 && model.input_shape[1] <= 64);
  else
    throw Error("cannot export architecture '" + model.architecture +
                "' (cpudl exports simplecnn, lenet5, mlp and resnet18)");
  // The last node's output is the graph's: name it "logits".
  onnx::NodeProto& last = *graph.mutable_node(graph.node_size() - 1);
  if (last.output(0) != y) throw Error("export: the graph does not end in its output");
  last.set_output(0, "logits");
  set_shape(*graph.add_output(), "logits", {model.classes});
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) throw Error("export: the ONNX model could not be serialised");
  return bytes;
}

}  // namespace cpudl::infer
