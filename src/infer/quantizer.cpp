// Quantisation of ONNX files (quantizer.h). The ModelProto is edited rather than rebuilt, so
// everything a rewrite does not touch (metadata, value_info, other domains' opsets, doc strings)
// passes through unchanged. External data is inlined: the output is one file.
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
#include "infer/onnx_build.h"
#include "infer/onnx_loader.h"
#include "infer/optimizer.h"
#include "kernels/half.h"
#include "kernels/int8/int8.h"

namespace cpudl::infer {
namespace {

// The input model, validated and loaded by the runtime's loader (whose constants are the
// weights), and its ModelProto with external data inlined, ready to edit.
struct Editable {
  Graph graph;
  onnx::ModelProto model;
  // Values that are constants under another name: outputs of Constant nodes, and of Identity
  // nodes reading a constant (PyTorch's exporter shares equal weights between layers that way).
  std::map<std::string, std::shared_ptr<const HostTensor>> aliases;
  const HostTensor* constant(const std::string& name) const {
    if (const auto it = graph.constants.find(name); it != graph.constants.end()) return it->second.get();
    if (const auto it = aliases.find(name); it != aliases.end()) return it->second.get();
    return nullptr;
  }
};

Editable open_for_edit(const std::filesystem::path& input, const std::filesystem::path& output) {
  io::require_output_is_not_an_input(output, {input}, "output");
  const std::string bytes = io::read_file(input);
  Editable e;
  e.graph = parse_onnx(bytes, input.string(), input.parent_path());
  if (!e.model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(input.string() + ": not a valid ONNX model");
  for (auto& t : *e.model.mutable_graph()->mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) continue;
    const HostTensor* loaded = e.constant(t.name());
    if (!loaded) throw Error(input.string() + ": initializer '" + t.name() + "' was not loaded");
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(loaded->bytes.data()), loaded->bytes.size()));
  }
  for (const Node& n : e.graph.nodes) {  // topological order: an alias of an alias resolves too
    if (n.outputs.size() != 1) continue;
    if (n.op == "Constant" && n.has("value") && n.attributes.at("value").t)
      e.aliases[n.outputs[0]] = n.attributes.at("value").t;
    if (n.op == "Identity" && n.inputs.size() == 1) {
      if (const auto it = e.graph.constants.find(n.inputs[0]); it != e.graph.constants.end())
        e.aliases[n.outputs[0]] = it->second;
      if (const auto it = e.aliases.find(n.inputs[0]); it != e.aliases.end())
        e.aliases[n.outputs[0]] = it->second;
    }
  }
  return e;
}

// Replaces the graph's nodes, drops the initializers nothing reads any more (the float weights),
// adds the new ones, notes the quantisation in the metadata and writes the file atomically.
std::size_t write_edited(Editable& e, std::vector<onnx::NodeProto>& nodes,
                         std::vector<onnx::TensorProto>& initializers, const std::string& note,
                         const std::filesystem::path& output) {
  onnx::GraphProto& g = *e.model.mutable_graph();
  // Nodes left without a reader (the Identity that fed a weight now quantised) go, repeatedly.
  std::set<std::string> read;
  for (bool changed = true; changed;) {
    read.clear();
    for (const auto& nd : nodes)
      for (const auto& i : nd.input()) read.insert(i);
    for (const auto& o : g.output()) read.insert(o.name());
    const auto unread = [&](const onnx::NodeProto& nd) {
      return std::none_of(nd.output().begin(), nd.output().end(),
                          [&](const std::string& o) { return read.count(o) != 0; });
    };
    const auto before = nodes.size();
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(), unread), nodes.end());
    changed = nodes.size() != before;
  }
  g.clear_node();
  for (auto& nd : nodes) *g.add_node() = std::move(nd);
  auto* inits = g.mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const onnx::TensorProto& t) { return !read.count(t.name()); }),
               inits->end());
  for (auto& t : initializers) *g.add_initializer() = std::move(t);
  auto* meta = e.model.add_metadata_props();
  meta->set_key("cpudl.quantization");
  meta->set_value(note);
  std::string serialized;
  if (!e.model.SerializeToString(&serialized))
    throw Error(output.string() + ": the quantised model exceeds protobuf's 2 GiB limit");
  io::write_file_atomically(output, serialized);
  return serialized.size();
}

void require_some_quantized(const QuantizeResult& r, const std::filesystem::path& input, const char* what) {
  if (std::any_of(r.layers.begin(), r.layers.end(), [](const QuantizedLayer& l) { return l.quantized; }))
    return;
  if (r.layers.empty())
    throw Error(input.string() + ": nothing to quantise: " + what + ", and the model has none");
  throw Error(input.string() + ": nothing to quantise: no layer qualifies (the first, '" + r.layers[0].node +
              "': " + r.layers[0].reason + ")");
}

struct QuantizedWeights {
  std::vector<std::int8_t> values;  // w's layout
  std::vector<float> scales;        // per channel
  double error = 0;                 // relative RMS
};

// Symmetric per channel along `axis` of w: scale = max |w| / L, q = round_half_even(w / scale)
// in [-L, L], L = 127 (never -128: kernels/int8/int8.h says why) or 63 (reduce_range). A
// negative axis quantises the whole tensor with one scale.
QuantizedWeights quantize_weights(const HostTensor& w, int axis, float levels) {
  QuantizedWeights q;
  const std::int64_t total = w.numel();
  std::int64_t channels = 1, inner = total;
  if (axis >= 0) {
    channels = w.shape[static_cast<std::size_t>(axis)];
    inner = 1;
    for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < w.shape.size(); ++d) inner *= w.shape[d];
  }
  auto channel = [&](std::int64_t i) { return (i / inner) % channels; };
  const float* src = w.data<float>();
  std::vector<float> peak(static_cast<std::size_t>(channels), 0.0f);
  for (std::int64_t i = 0; i < total; ++i)
    peak[static_cast<std::size_t>(channel(i))] =
        std::max(peak[static_cast<std::size_t>(channel(i))], std::fabs(src[i]));
  q.scales.resize(peak.size());
  for (std::size_t c = 0; c < peak.size(); ++c) q.scales[c] = peak[c] > 0 ? peak[c] / levels : 1.0f;
  q.values.resize(static_cast<std::size_t>(total));
  double err = 0, norm = 0;
  for (std::int64_t i = 0; i < total; ++i) {
    const float scale = q.scales[static_cast<std::size_t>(channel(i))];
    const float r = std::min(std::max(std::nearbyint(src[i] / scale), -levels), levels);
    q.values[static_cast<std::size_t>(i)] = static_cast<std::int8_t>(r);
    const double d = static_cast<double>(src[i]) - static_cast<double>(r) * scale;
    err += d * d;
    norm += static_cast<double>(src[i]) * src[i];
  }
  q.error = norm > 0 ? std::sqrt(err / norm) : 0.0;
  return q;
}

// w (K x N, or N x K when transposed) as a K x N float tensor.
HostTensor as_k_by_n(const HostTensor& w, bool transposed) {
  if (!transposed) return w;
  const std::int64_t n = w.shape[0], k = w.shape[1];
  HostTensor t = HostTensor::zeros(DType::f32, {k, n});
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t j = 0; j < n; ++j) t.data<float>()[i * n + j] = w.data<float>()[j * k + i];
  return t;
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

// A MatMul, Gemm (or, for static mode, Conv) whose weights can be quantised, or why not.
struct Candidate {
  const HostTensor* w = nullptr;
  bool transposed = false;  // Gemm transB
  int channel_axis = 0;     // of w: the output channels
  std::string bias;         // Gemm's C, a row of N
  QuantizedLayer layer;
};

std::map<std::string, const onnx::AttributeProto*> attributes_of(const onnx::NodeProto& node) {
  std::map<std::string, const onnx::AttributeProto*> attrs;
  for (const auto& a : node.attribute()) attrs[a.name()] = &a;
  return attrs;
}

// Fills c.layer.reason when the node cannot be quantised.
Candidate examine(const Editable& e, const onnx::NodeProto& node) {
  Candidate c;
  c.layer.node = node.name().empty() ? node.output(0) : node.name();
  c.layer.op = node.op_type();
  const bool gemm = node.op_type() == "Gemm", conv = node.op_type() == "Conv";
  const auto attrs = attributes_of(node);
  auto attr_int = [&](const char* key, std::int64_t fallback) {
    return attrs.count(key) ? attrs.at(key)->i() : fallback;
  };
  auto attr_float = [&](const char* key, float fallback) {
    return attrs.count(key) ? attrs.at(key)->f() : fallback;
  };
  c.w = node.input_size() >= 2 ? e.constant(node.input(1)) : nullptr;
  const std::size_t rank = conv ? 4 : 2;
  if (!c.w || c.w->dtype != DType::f32 || c.w->shape.size() != rank) {
    c.layer.reason = "weights are not a constant float tensor of rank " + std::to_string(rank);
    return c;
  }
  if (gemm &&
      (attr_int("transA", 0) != 0 || attr_float("alpha", 1) != 1.0f || attr_float("beta", 1) != 1.0f)) {
    c.layer.reason = "Gemm with transA, alpha or beta";
    return c;
  }
  c.transposed = gemm && attr_int("transB", 0) != 0;
  if (conv) {
    c.channel_axis = 0;
    c.layer.n = c.w->shape[0];
    c.layer.k = c.w->shape[1] * c.w->shape[2] * c.w->shape[3];
  } else {
    c.channel_axis = c.transposed ? 0 : 1;
    c.layer.n = c.w->shape[static_cast<std::size_t>(c.channel_axis)];
    c.layer.k = c.w->shape[static_cast<std::size_t>(1 - c.channel_axis)];
  }
  if (gemm && node.input_size() > 2 && !node.input(2).empty()) {
    const HostTensor* b = e.constant(node.input(2));
    if (!b || b->dtype != DType::f32 || b->numel() != c.layer.n ||
        (b->shape.size() == 2 && b->shape[0] != 1)) {
      c.layer.reason = "C is not a constant row of N floats";
      return c;
    }
    c.bias = node.input(2);
  }
  if (c.layer.k >= 65536) c.layer.reason = "K >= 65536 could overflow the int32 sums";
  return c;
}

std::string format_error(double error, double limit) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "weight error %.4f exceeds %.4f", error, limit);
  return buf;
}

}  // namespace

QuantizeResult quantize_onnx_dynamic(const std::filesystem::path& input, const std::filesystem::path& output,
                                     const QuantizeOptions& options) {
  Editable e = open_for_edit(input, output);
  onnx::GraphProto& g = *e.model.mutable_graph();
  QuantizeResult result;
  result.bytes_in = e.model.ByteSizeLong();
  Names names(g);
  std::unordered_map<std::string, std::array<std::string, 3>> quantized_inputs;  // x -> (q, scale, zero)
  std::vector<onnx::NodeProto> nodes;
  std::vector<onnx::TensorProto> new_initializers;
  const float levels = options.reduce_range ? 63.0f : 127.0f;
  for (const onnx::NodeProto& node : g.node()) {
    if (node.op_type() != "MatMul" && node.op_type() != "Gemm") {
      nodes.push_back(node);
      continue;
    }
    Candidate c = examine(e, node);
    QuantizedWeights q;
    HostTensor wm;
    if (c.layer.reason.empty()) {
      wm = as_k_by_n(*c.w, c.transposed);  // MatMulInteger takes K x N
      q = quantize_weights(wm, 1, levels);
      c.layer.weight_error = q.error;
      if (q.error > options.max_weight_error)
        c.layer.reason = format_error(q.error, options.max_weight_error);
    }
    c.layer.quantized = c.layer.reason.empty();
    result.layers.push_back(c.layer);
    if (!c.layer.quantized) {
      nodes.push_back(node);
      continue;
    }
    const std::int64_t k = c.layer.k, n = c.layer.n;
    const std::string x = node.input(0), out = node.output(0), base = c.layer.node;
    auto& xq = quantized_inputs[x];
    if (xq[0].empty()) {
      xq = {names.fresh(x + "_quantized"), names.fresh(x + "_scale"), names.fresh(x + "_zero_point")};
      nodes.push_back(make_node("DynamicQuantizeLinear", names.fresh(x + "_DynamicQuantizeLinear"), {x},
                                {xq[0], xq[1], xq[2]}));
    }
    const std::string wq = names.fresh(node.input(1) + "_quantized"),
                      ws = names.fresh(node.input(1) + "_scale");
    new_initializers.push_back(
        make_tensor(wq, onnx::TensorProto::INT8, {k, n}, q.values.data(), q.values.size()));
    new_initializers.push_back(
        make_tensor(ws, onnx::TensorProto::FLOAT, {n}, q.scales.data(), q.scales.size() * 4));
    const std::string product = names.fresh(out + "_int32"), as_float = names.fresh(out + "_float");
    const std::string scale = names.fresh(out + "_scale"),
                      scaled = c.bias.empty() ? out : names.fresh(out + "_unbiased");
    nodes.push_back(
        make_node("MatMulInteger", names.fresh(base + "_MatMulInteger"), {xq[0], wq, xq[2]}, {product}));
    onnx::NodeProto cast = make_node("Cast", names.fresh(base + "_Cast"), {product}, {as_float});
    set_int_attribute(cast, "to", onnx::TensorProto::FLOAT);
    nodes.push_back(cast);
    nodes.push_back(make_node("Mul", names.fresh(base + "_scale_Mul"), {xq[1], ws}, {scale}));
    nodes.push_back(make_node("Mul", names.fresh(base + "_Mul"), {as_float, scale}, {scaled}));
    if (!c.bias.empty())
      nodes.push_back(make_node("Add", names.fresh(base + "_bias_Add"), {scaled, c.bias}, {out}));
  }
  require_some_quantized(result, input, "dynamic mode quantises MatMul and Gemm");
  result.bytes_out = write_edited(e, nodes, new_initializers,
                                  std::string("dynamic int8: weights symmetric per output channel in ") +
                                      (options.reduce_range ? "[-63, 63]" : "[-127, 127]") +
                                      ", activations uint8 per tensor",
                                  output);
  return result;
}

// BatchNormalization nodes right after a Conv with float weights (a model exported with BN
// kept, as training-mode exports are) fold into the Conv first, as ONNX Runtime's quantisation
// pre-processing does: the int8 weights then carry the normalisation, and the runtime can fuse
// the Conv's residual Add and ReLU into its int8 convolution. New weights go to `initializers`
// (and to e's constants, for the passes that follow); returns how many were folded.
int fold_batch_norms_before_quantizing(Editable& e, std::vector<onnx::TensorProto>& initializers) {
  onnx::GraphProto& g = *e.model.mutable_graph();
  std::map<std::string, int> readers, producer;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& in : g.node(i).input()) ++readers[in];
    for (const auto& out : g.node(i).output()) producer[out] = i;
  }
  for (const auto& o : g.output()) ++readers[o.name()];
  Names names(g);
  std::set<int> folded;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& bn = g.node(i);
    if (bn.op_type() != "BatchNormalization" || bn.input_size() != 5 || bn.output_size() != 1) continue;
    float epsilon = 1e-5f;
    bool training = false;
    for (const auto& a : bn.attribute()) {
      if (a.name() == "epsilon") epsilon = a.f();
      if (a.name() == "training_mode") training = a.i() != 0;
    }
    const auto p = producer.find(bn.input(0));
    if (training || p == producer.end() || readers[bn.input(0)] != 1) continue;
    onnx::NodeProto& conv = *g.mutable_node(p->second);
    if (conv.op_type() != "Conv" || conv.input_size() < 2) continue;
    const HostTensor* w = e.constant(conv.input(1));
    const bool has_bias = conv.input_size() > 2 && !conv.input(2).empty();
    const HostTensor* b = has_bias ? e.constant(conv.input(2)) : nullptr;
    if (!w || w->dtype != DType::f32 || w->shape.size() != 4 || (has_bias && (!b || b->dtype != DType::f32)))
      continue;
    const HostTensor* params[4];
    bool ok = true;
    for (int k = 0; k < 4 && ok; ++k) {
      params[k] = e.constant(bn.input(k + 1));
      ok = params[k] && params[k]->dtype == DType::f32 && params[k]->shape == Shape{w->shape[0]};
    }
    if (!ok) continue;
    auto [w2, b2] = fold_batch_norm(*w, b, params, epsilon);
    const std::string wn = names.fresh(conv.input(1) + "_bn_folded"),
                      bname = names.fresh(bn.output(0) + "_bias");
    initializers.push_back(
        make_tensor(wn, onnx::TensorProto::FLOAT, w2.shape, w2.bytes.data(), w2.bytes.size()));
    initializers.push_back(
        make_tensor(bname, onnx::TensorProto::FLOAT, b2.shape, b2.bytes.data(), b2.bytes.size()));
    e.aliases[wn] = std::make_shared<HostTensor>(std::move(w2));
    e.aliases[bname] = std::make_shared<HostTensor>(std::move(b2));
    conv.set_input(1, wn);
    if (has_bias)
      conv.set_input(2, bname);
    else
      conv.add_input(bname);
    conv.set_output(0, bn.output(0));
    folded.insert(i);
  }
  if (folded.empty()) return 0;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (int i = 0; i < g.node_size(); ++i)
    if (!folded.count(i)) *kept.Add() = g.node(i);
  g.mutable_node()->Swap(&kept);
  return static_cast<int>(folded.size());
}

QuantizeResult quantize_onnx_bf16(const std::filesystem::path& input, const std::filesystem::path& output,
                                  const QuantizeOptions& options) {
  Editable e = open_for_edit(input, output);
  onnx::GraphProto& g = *e.model.mutable_graph();
  QuantizeResult result;
  result.bytes_in = e.model.ByteSizeLong();
  Names names(g);
  std::vector<onnx::NodeProto> nodes;
  std::vector<onnx::TensorProto> initializers;
  std::map<std::string, std::string> converted;  // float weight -> its Cast's output
  for (const onnx::NodeProto& node : g.node()) {
    if (node.op_type() != "Conv" && node.op_type() != "Gemm" && node.op_type() != "MatMul") {
      nodes.push_back(node);
      continue;
    }
    Candidate c = examine(e, node);
    // Any float weight goes (bf16 has no K limit or Gemm restriction): only a non-constant one
    // stays.
    if (c.w && c.w->dtype == DType::f32) c.layer.reason.clear();
    onnx::NodeProto rewritten = node;
    if (c.layer.reason.empty() && e.constant(node.input(0))) c.layer.reason = "its input is a constant";
    if (c.layer.reason.empty()) {
      const std::string& w_name = node.input(1);
      if (!converted.count(w_name)) {
        const auto n = static_cast<std::size_t>(c.w->numel());
        std::vector<std::uint16_t> bits(n);
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float v = c.w->data<float>()[i];
          bits[i] = f32_to_bf16(v);
          const double d = static_cast<double>(bf16_to_f32(bits[i])) - v;
          err += d * d;
          norm += static_cast<double>(v) * v;
        }
        c.layer.weight_error = norm > 0 ? std::sqrt(err / norm) : 0.0;
        const std::string stored = names.fresh(w_name + "_bf16"), as_float = names.fresh(w_name + "_float");
        initializers.push_back(
            make_tensor(stored, onnx::TensorProto::BFLOAT16, c.w->shape, bits.data(), n * 2));
        onnx::NodeProto cast = make_node("Cast", names.fresh(w_name + "_Cast"), {stored}, {as_float});
        set_int_attribute(cast, "to", onnx::TensorProto::FLOAT);
        nodes.push_back(cast);
        converted[w_name] = as_float;
      }
      if (c.layer.weight_error > options.max_weight_error)
        c.layer.reason = format_error(c.layer.weight_error, options.max_weight_error);
      else
        rewritten.set_input(1, converted[w_name]);
    }
    c.layer.quantized = c.layer.reason.empty();
    result.layers.push_back(c.layer);
    nodes.push_back(rewritten);
  }
  require_some_quantized(result, input, "bf16 mode stores the weights of Conv, Gemm and MatMul");
  result.bytes_out =
      write_edited(e, nodes, initializers,
                   "bf16: the weights of Conv, Gemm and MatMul stored in bfloat16 (rounded to nearest "
                   "even) behind a Cast to float",
                   output);
  return result;
}

QuantizeResult quantize_onnx_static(const std::filesystem::path& input, const std::filesystem::path& output,
                                    const std::vector<Tensor>& calibration, const QuantizeOptions& options) {
  Editable e = open_for_edit(input, output);
  onnx::GraphProto& g = *e.model.mutable_graph();
  QuantizeResult result;
  result.bytes_in = e.model.ByteSizeLong();
  const float levels = options.reduce_range ? 63.0f : 127.0f;
  // Per-axis DequantizeLinear arrived in opset 13; older models get one scale per weight tensor.
  const bool per_channel = e.graph.opset >= 13;
  std::vector<onnx::TensorProto> initializers;
  result.folded_batch_norms = fold_batch_norms_before_quantizing(e, initializers);

  // Pass 1: which layers, and which activations feed them.
  std::map<int, Candidate> candidates;  // node index -> candidate
  std::map<int, QuantizedWeights> weights;
  std::vector<std::string> activations;
  std::set<std::string> seen;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    if (node.op_type() != "Conv" && node.op_type() != "Gemm" && node.op_type() != "MatMul") continue;
    Candidate c = examine(e, node);
    if (c.layer.reason.empty()) {
      QuantizedWeights& q = weights[i] = quantize_weights(*c.w, per_channel ? c.channel_axis : -1, levels);
      c.layer.weight_error = q.error;
      if (q.error > options.max_weight_error)
        c.layer.reason = format_error(q.error, options.max_weight_error);
    }
    if (c.layer.reason.empty() && e.constant(node.input(0))) c.layer.reason = "its input is a constant";
    c.layer.quantized = c.layer.reason.empty();
    if (c.layer.quantized && seen.insert(node.input(0)).second) activations.push_back(node.input(0));
    candidates[i] = c;
  }
  QuantizeResult probe;
  for (const auto& [i, c] : candidates) probe.layers.push_back(c.layer);
  require_some_quantized(probe, input, "static mode quantises Conv, Gemm and MatMul");
  // A residual join whose two branches both end in quantised Convs (ResNet's downsample blocks):
  // the later Conv's output, the one the runtime adds as a residual into the other's epilogue, gets
  // a QDQ pair of its own before the Add, as ONNX Runtime's quantiser quantises an Add's inputs. Its
  // calibrated scale lets the runtime keep that branch in uint8 (keep_activations_in_int8); every
  // other residual already has the scale its convolution readers use.
  std::map<std::string, int> produced_by, readers;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& o : g.node(i).output()) produced_by[o] = i;
    for (const auto& in : g.node(i).input()) ++readers[in];
  }
  for (const auto& o : g.output()) ++readers[o.name()];
  auto quantized_conv = [&](const std::string& v) {
    const auto p = produced_by.find(v);
    if (p == produced_by.end() || g.node(p->second).op_type() != "Conv") return -1;
    const auto c = candidates.find(p->second);
    return c != candidates.end() && c->second.layer.quantized ? p->second : -1;
  };
  std::set<std::string> residual_branches;
  for (const auto& node : g.node()) {
    if (node.op_type() != "Add" || node.input_size() != 2 || node.input(0) == node.input(1)) continue;
    const int a = quantized_conv(node.input(0)), b = quantized_conv(node.input(1));
    if (a < 0 || b < 0) continue;
    const std::string& later = node.input(a > b ? 0 : 1);
    if (readers[later] == 1 && seen.insert(later).second) {
      activations.push_back(later);
      residual_branches.insert(later);
    }
  }

  // Pass 2: calibration fixes each activation's uint8 scale and zero point.
  const auto ranges = calibrate(e.graph, activations, calibration, options.observer, options.percentile,
                                options.on_calibration_batch);
  Names names(g);
  std::map<std::string, std::string> dequantized;                     // activation -> its QDQ'd name
  std::map<std::string, std::pair<std::string, std::string>> params;  // activation -> its scale, zero point
  std::vector<onnx::NodeProto> nodes;
  for (const auto& x : activations) {
    const ActivationRange r = ranges.at(x);
    const kernels::U8QuantParams p = kernels::u8_quant_params(r.lo, r.hi);  // the runtime's rule
    const float scale = p.scale > 0.0f ? p.scale : 1.0f;                    // a value that was always 0
    const auto zero = static_cast<std::uint8_t>(p.zero);
    result.activations.push_back({x, r.lo, r.hi, scale, zero});
    const std::string s = names.fresh(x + "_scale"), z = names.fresh(x + "_zero_point");
    initializers.push_back(make_tensor(s, onnx::TensorProto::FLOAT, {}, &scale, 4));
    initializers.push_back(make_tensor(z, onnx::TensorProto::UINT8, {}, &zero, 1));
    dequantized[x] = names.fresh(x + "_dequantized");
    params[x] = {s, z};
  }
  // Rebuild the node list: each activation's QuantizeLinear/DequantizeLinear pair right after the
  // node producing it (graph inputs' pairs first), each quantised layer reading the dequantised
  // activation and its weights through a DequantizeLinear.
  auto pair_for = [&](const std::string& x) {
    const auto& [s, z] = params.at(x);
    const std::string q = names.fresh(x + "_quantized");
    nodes.push_back(make_node("QuantizeLinear", names.fresh(x + "_QuantizeLinear"), {x, s, z}, {q}));
    nodes.push_back(
        make_node("DequantizeLinear", names.fresh(x + "_DequantizeLinear"), {q, s, z}, {dequantized.at(x)}));
  };
  for (const auto& in : g.input())
    if (dequantized.count(in.name())) pair_for(in.name());
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto node = g.node(i);
    const auto it = candidates.find(i);
    if (it != candidates.end()) result.layers.push_back(it->second.layer);
    if (node.op_type() == "Add")
      for (int k = 0; k < node.input_size(); ++k)
        if (residual_branches.count(node.input(k))) node.set_input(k, dequantized.at(node.input(k)));
    if (it != candidates.end() && it->second.layer.quantized) {
      const Candidate& c = it->second;
      const QuantizedWeights& q = weights.at(i);
      const std::string wq = names.fresh(node.input(1) + "_quantized"),
                        ws = names.fresh(node.input(1) + "_scale");
      const std::string wz = names.fresh(node.input(1) + "_zero_point"),
                        wd = names.fresh(node.input(1) + "_dequantized");
      const std::vector<std::int8_t> zeros(q.scales.size(), 0);
      const std::vector<std::int64_t> scale_dims =
          per_channel ? std::vector<std::int64_t>{static_cast<std::int64_t>(q.scales.size())}
                      : std::vector<std::int64_t>{};
      initializers.push_back(
          make_tensor(wq, onnx::TensorProto::INT8, c.w->shape, q.values.data(), q.values.size()));
      initializers.push_back(
          make_tensor(ws, onnx::TensorProto::FLOAT, scale_dims, q.scales.data(), q.scales.size() * 4));
      initializers.push_back(
          make_tensor(wz, onnx::TensorProto::INT8, scale_dims, zeros.data(), zeros.size()));
      onnx::NodeProto dq =
          make_node("DequantizeLinear", names.fresh(node.input(1) + "_DequantizeLinear"), {wq, ws, wz}, {wd});
      if (per_channel) set_int_attribute(dq, "axis", c.channel_axis);
      nodes.push_back(dq);
      node.set_input(0, dequantized.at(node.input(0)));
      node.set_input(1, wd);
    }
    nodes.push_back(node);
    for (const auto& o : node.output())
      if (dequantized.count(o)) pair_for(o);
  }
  result.bytes_out =
      write_edited(e, nodes, initializers,
                   std::string("static int8 (QDQ): activations uint8 per tensor, calibrated (") +
                       (options.observer == Observer::min_max ? "min-max" : "percentile") +
                       "), weights symmetric " + (per_channel ? "per output channel" : "per tensor") +
                       " in " + (options.reduce_range ? "[-63, 63]" : "[-127, 127]"),
                   output);
  return result;
}

}  // namespace cpudl::infer
