// Dynamic int8 quantisation of an ONNX file (quantizer.h). The ModelProto is edited in place of
// rebuilding it, so everything the rewrite does not touch (metadata, value_info, other domains'
// opsets, doc strings) passes through unchanged. External data is inlined: the output is one file.
#include "infer/quantizer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "infer/onnx_loader.h"

namespace cpudl::infer {
namespace {

// W as a row-major K x N float matrix (Gemm's transB stores it N x K).
std::vector<float> weight_matrix(const HostTensor& w, bool transposed, std::int64_t& k, std::int64_t& n) {
  k = transposed ? w.shape[1] : w.shape[0];
  n = transposed ? w.shape[0] : w.shape[1];
  std::vector<float> out(static_cast<std::size_t>(k * n));
  const float* src = w.data<float>();
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      out[static_cast<std::size_t>(i * n + j)] = transposed ? src[j * k + i] : src[i * n + j];
  return out;
}

struct QuantizedWeights {
  std::vector<std::int8_t> values;  // K x N
  std::vector<float> scales;        // N
  double error = 0;                 // relative RMS
};

// Symmetric per output channel (column): scale = max |w| / L, q = round_half_even(w / scale) in
// [-L, L], L = 127 (never -128: int8.h says why the int8 kernels need that) or 63 (reduce_range).
QuantizedWeights quantize_columns(const std::vector<float>& w, std::int64_t k, std::int64_t n, float levels) {
  QuantizedWeights q;
  q.values.resize(w.size());
  q.scales.resize(static_cast<std::size_t>(n));
  double err = 0, norm = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    float peak = 0;
    for (std::int64_t i = 0; i < k; ++i) peak = std::max(peak, std::fabs(w[static_cast<std::size_t>(i * n + j)]));
    const float scale = peak > 0 ? peak / levels : 1.0f;
    q.scales[static_cast<std::size_t>(j)] = scale;
    for (std::int64_t i = 0; i < k; ++i) {
      const float v = w[static_cast<std::size_t>(i * n + j)];
      const float r = std::min(std::max(std::nearbyint(v / scale), -levels), levels);
      q.values[static_cast<std::size_t>(i * n + j)] = static_cast<std::int8_t>(r);
      err += (static_cast<double>(v) - static_cast<double>(r) * scale) * (static_cast<double>(v) - static_cast<double>(r) * scale);
      norm += static_cast<double>(v) * v;
    }
  }
  q.error = norm > 0 ? std::sqrt(err / norm) : 0.0;
  return q;
}

onnx::TensorProto make_tensor(const std::string& name, int type, const std::vector<std::int64_t>& dims, const void* data,
                              std::size_t bytes) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (std::int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(static_cast<const char*>(data), bytes));
  return t;
}

onnx::NodeProto make_node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                          std::vector<std::string> outputs) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : inputs) n.add_input(i);
  for (auto& o : outputs) n.add_output(o);
  return n;
}

// Names unused anywhere in the graph, derived from a base.
class Names {
 public:
  explicit Names(const onnx::GraphProto& g) {
    for (const auto& t : g.initializer()) used_.insert(t.name());
    for (const auto& v : g.input()) used_.insert(v.name());
    for (const auto& n : g.node()) {
      used_.insert(n.name());
      for (const auto& o : n.output()) used_.insert(o);
    }
  }
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; used_.count(name); ++i) name = base + "_" + std::to_string(i);
    used_.insert(name);
    return name;
  }

 private:
  std::set<std::string> used_;
};

}  // namespace

DynamicQuantizeResult quantize_onnx_dynamic(const std::filesystem::path& input, const std::filesystem::path& output,
                                            const DynamicQuantizeOptions& options) {
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && std::filesystem::equivalent(input, output, ec))
    throw Error(output.string() + ": the output would replace the input model; choose another file");
  const std::string bytes = io::read_file(input);
  // The loader validates everything and reads external data; its constants are the weights.
  const Graph graph = parse_onnx(bytes, input.string(), input.parent_path());
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) throw Error(input.string() + ": not a valid ONNX model");
  onnx::GraphProto& g = *model.mutable_graph();

  // Inline external data, from the loader's copy.
  for (auto& t : *g.mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) continue;
    const auto it = graph.constants.find(t.name());
    if (it == graph.constants.end()) throw Error(input.string() + ": initializer '" + t.name() + "' was not loaded");
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(it->second->bytes.data()), it->second->bytes.size()));
  }
  auto constant = [&](const std::string& name) -> const HostTensor* {
    const auto it = graph.constants.find(name);
    return it == graph.constants.end() ? nullptr : it->second.get();
  };

  DynamicQuantizeResult result;
  result.bytes_in = model.ByteSizeLong();
  Names names(g);
  std::unordered_map<std::string, std::array<std::string, 3>> quantized_inputs;  // x -> (q, scale, zero)
  std::vector<onnx::NodeProto> nodes;
  std::vector<onnx::TensorProto> new_initializers;
  for (const onnx::NodeProto& node : g.node()) {
    const bool matmul = node.op_type() == "MatMul", gemm = node.op_type() == "Gemm";
    if (!matmul && !gemm) {
      nodes.push_back(node);
      continue;
    }
    QuantizedLayer layer;
    layer.node = node.name().empty() ? node.output(0) : node.name();
    layer.op = node.op_type();
    auto keep = [&](const std::string& reason) {
      layer.reason = reason;
      result.layers.push_back(layer);
      nodes.push_back(node);
    };
    std::map<std::string, const onnx::AttributeProto*> attrs;
    for (const auto& a : node.attribute()) attrs[a.name()] = &a;
    auto attr_int = [&](const char* key, std::int64_t fallback) { return attrs.count(key) ? attrs[key]->i() : fallback; };
    auto attr_float = [&](const char* key, float fallback) { return attrs.count(key) ? attrs[key]->f() : fallback; };
    const HostTensor* w = node.input_size() >= 2 ? constant(node.input(1)) : nullptr;
    if (!w || w->dtype != DType::f32 || w->shape.size() != 2) {
      keep("weights are not a constant 2-D float matrix");
      continue;
    }
    if (gemm && (attr_int("transA", 0) != 0 || attr_float("alpha", 1) != 1.0f || attr_float("beta", 1) != 1.0f)) {
      keep("Gemm with transA, alpha or beta");
      continue;
    }
    const bool transposed = gemm && attr_int("transB", 0) != 0;
    std::int64_t k = 0, n = 0;
    const std::vector<float> wm = weight_matrix(*w, transposed, k, n);
    layer.k = k;
    layer.n = n;
    std::string bias;
    if (gemm && node.input_size() > 2 && !node.input(2).empty()) {
      const HostTensor* c = constant(node.input(2));
      if (!c || c->dtype != DType::f32 || c->numel() != n || (c->shape.size() == 2 && c->shape[0] != 1)) {
        keep("C is not a constant row of N floats");
        continue;
      }
      bias = node.input(2);
    }
    if (k >= 65536) {
      keep("K >= 65536 could overflow the int32 sums");
      continue;
    }
    const QuantizedWeights q = quantize_columns(wm, k, n, options.reduce_range ? 63.0f : 127.0f);
    layer.weight_error = q.error;
    if (q.error > options.max_weight_error) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "weight error %.4f exceeds %.4f", q.error, options.max_weight_error);
      keep(buf);
      continue;
    }
    layer.quantized = true;
    result.layers.push_back(layer);

    const std::string x = node.input(0), out = node.output(0), base = layer.node;
    auto& xq = quantized_inputs[x];
    if (xq[0].empty()) {
      xq = {names.fresh(x + "_quantized"), names.fresh(x + "_scale"), names.fresh(x + "_zero_point")};
      nodes.push_back(make_node("DynamicQuantizeLinear", names.fresh(x + "_DynamicQuantizeLinear"), {x}, {xq[0], xq[1], xq[2]}));
    }
    const std::string wq = names.fresh(node.input(1) + "_quantized"), ws = names.fresh(node.input(1) + "_scale");
    new_initializers.push_back(make_tensor(wq, onnx::TensorProto::INT8, {k, n}, q.values.data(), q.values.size()));
    new_initializers.push_back(make_tensor(ws, onnx::TensorProto::FLOAT, {n}, q.scales.data(), q.scales.size() * 4));
    const std::string product = names.fresh(out + "_int32"), as_float = names.fresh(out + "_float");
    const std::string scale = names.fresh(out + "_scale"), scaled = bias.empty() ? out : names.fresh(out + "_unbiased");
    nodes.push_back(make_node("MatMulInteger", names.fresh(base + "_MatMulInteger"), {xq[0], wq, xq[2]}, {product}));
    onnx::NodeProto cast = make_node("Cast", names.fresh(base + "_Cast"), {product}, {as_float});
    auto* to = cast.add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::FLOAT);
    nodes.push_back(cast);
    nodes.push_back(make_node("Mul", names.fresh(base + "_scale_Mul"), {xq[1], ws}, {scale}));
    nodes.push_back(make_node("Mul", names.fresh(base + "_Mul"), {as_float, scale}, {scaled}));
    if (!bias.empty()) nodes.push_back(make_node("Add", names.fresh(base + "_bias_Add"), {scaled, bias}, {out}));
  }
  if (std::none_of(result.layers.begin(), result.layers.end(), [](const QuantizedLayer& l) { return l.quantized; })) {
    if (result.layers.empty())
      throw Error(input.string() + ": nothing to quantise: dynamic mode quantises MatMul and Gemm, and the model has none");
    throw Error(input.string() + ": nothing to quantise: no MatMul or Gemm qualifies (the first, '" + result.layers[0].node +
                "': " + result.layers[0].reason + ")");
  }

  g.clear_node();
  for (auto& nd : nodes) *g.add_node() = std::move(nd);
  // Drop the float weights nothing reads any more.
  std::set<std::string> read;
  for (const auto& nd : g.node())
    for (const auto& i : nd.input()) read.insert(i);
  for (const auto& o : g.output()) read.insert(o.name());
  auto* inits = g.mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(), [&](const onnx::TensorProto& t) { return !read.count(t.name()); }),
               inits->end());
  for (auto& t : new_initializers) *g.add_initializer() = std::move(t);
  auto* note = model.add_metadata_props();
  note->set_key("cpudl.quantization");
  note->set_value(std::string("dynamic int8: weights symmetric per output channel in ") +
                  (options.reduce_range ? "[-63, 63]" : "[-127, 127]") + ", activations uint8 per tensor");

  std::string serialized;
  if (!model.SerializeToString(&serialized)) throw Error(output.string() + ": the quantised model exceeds protobuf's 2 GiB limit");
  io::write_file_atomically(output, serialized);
  result.bytes_out = serialized.size();
  return result;
}

}  // namespace cpudl::infer
