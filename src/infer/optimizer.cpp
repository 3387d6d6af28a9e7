// The optimiser's rewrites (see optimizer.h). Patterns match only when the intermediate values
// have no other consumer and are not graph outputs, so a rewrite never changes what is observable.
#include "infer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <unordered_map>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "infer/op_list.h"

namespace cpudl::infer {
namespace {

Attribute int_attribute(std::int64_t value) {
  return Attribute{Attribute::Kind::i, value, 0, "", {}, {}, {}, nullptr, nullptr};
}

Attribute float_attribute(float value) {
  return Attribute{Attribute::Kind::f, 0, value, "", {}, {}, {}, nullptr, nullptr};
}

// Consumers of each value name, and the graph outputs.
struct Uses {
  std::unordered_map<std::string, std::vector<std::size_t>> consumers;
  std::set<std::string> outputs;
  explicit Uses(const Graph& g) {
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) consumers[in].push_back(i);
    for (const auto& o : g.outputs) outputs.insert(o.name);
  }
  // The one node reading `value`, when nothing else (not even the graph's outputs) does.
  std::optional<std::size_t> only_consumer(const std::string& value) const {
    if (outputs.count(value)) return std::nullopt;
    const auto it = consumers.find(value);
    if (it == consumers.end() || it->second.size() != 1) return std::nullopt;
    return it->second[0];
  }
};

const HostTensor* constant_of(const Graph& g, const std::string& name) {
  const auto it = g.constants.find(name);
  return it == g.constants.end() ? nullptr : it->second.get();
}

bool is_scalar_constant(const Graph& g, const std::string& name, float value, float tolerance = 1e-6f) {
  const HostTensor* t = constant_of(g, name);
  if (!t || t->numel() != 1 || t->dtype != DType::f32) return false;
  return std::fabs(t->data<float>()[0] - value) <= tolerance * std::max(1.0f, std::fabs(value));
}

void drop_removed(Graph& g, const std::vector<bool>& removed) {
  std::vector<Node> kept;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

void rename_input(Graph& g, const std::string& from, const std::string& to) {
  for (auto& n : g.nodes)
    for (auto& in : n.inputs)
      if (in == from) in = to;
}

// Constant nodes become constants; they are folded whatever their consumers.
void fold_constant_nodes(Graph& g) {
  std::vector<bool> removed(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.op != "Constant" || n.outputs.size() != 1) continue;
    const auto it = n.attributes.find("value");
    if (it == n.attributes.end() || !it->second.t) continue;  // value_float(s)/int(s): built at plan time
    g.constants[n.outputs[0]] = it->second.t;
    removed[i] = true;
  }
  drop_removed(g, removed);
}

// Identity and inference-mode Dropout forward their input.
void remove_identities(Graph& g, OptimizerReport& report) {
  Uses uses(g);
  std::vector<bool> removed(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    const bool dropout =
        n.op == "Dropout" && (n.outputs.size() == 1 || n.outputs[1].empty()) && n.inputs.size() < 3;
    if ((n.op != "Identity" && !dropout) || n.inputs.empty() || uses.outputs.count(n.outputs[0])) continue;
    rename_input(g, n.outputs[0], n.inputs[0]);
    removed[i] = true;
    report.add("removed " + n.op, "removed " + n.label());
  }
  drop_removed(g, removed);
}

// BatchNormalization(Conv(x, W, B)) = Conv(x, W * s, (B - mean) * s + beta), s = gamma / sqrt(var + eps),
// per output channel; likewise for a Gemm whose output columns are the channels.
}  // namespace

std::pair<HostTensor, HostTensor> fold_batch_norm(const HostTensor& w, const HostTensor* b,
                                                  const HostTensor* const params[4], float epsilon) {
  const std::int64_t channels = w.shape[0], per = w.numel() / channels;
  HostTensor w2 = w;
  HostTensor b2 = HostTensor::zeros(DType::f32, {channels});
  for (std::int64_t c = 0; c < channels; ++c) {
    const float scale = params[0]->data<float>()[c] / std::sqrt(params[3]->data<float>()[c] + epsilon);
    for (std::int64_t k = 0; k < per; ++k) w2.data<float>()[c * per + k] *= scale;
    const float bias = b ? b->data<float>()[c] : 0.0f;
    b2.data<float>()[c] = (bias - params[2]->data<float>()[c]) * scale + params[1]->data<float>()[c];
  }
  return {std::move(w2), std::move(b2)};
}

namespace {

void fold_batch_norms(Graph& g, OptimizerReport& report) {
  Uses uses(g);
  std::vector<bool> removed(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& bn = g.nodes[i];
    if (bn.op != "BatchNormalization" || bn.inputs.size() != 5 || bn.outputs.size() != 1 ||
        bn.get_int("training_mode", 0))
      continue;
    std::size_t p = 0;
    bool found = false;
    for (std::size_t j = 0; j < i; ++j)
      for (const auto& out : g.nodes[j].outputs)
        if (out == bn.inputs[0]) p = j, found = true;
    if (!found || removed[p] || uses.only_consumer(bn.inputs[0]) != i) continue;
    Node& conv = g.nodes[p];
    const bool is_conv = conv.op == "Conv" && conv.inputs.size() >= 2;
    const bool is_gemm = conv.op == "Gemm" && conv.inputs.size() >= 2 && conv.get_int("transB", 0) == 1 &&
                         conv.get_float("alpha", 1) == 1 && conv.get_float("beta", 1) == 1;
    if (!is_conv && !is_gemm) continue;
    const HostTensor* w = constant_of(g, conv.inputs[1]);
    const HostTensor* b =
        conv.inputs.size() > 2 && !conv.inputs[2].empty() ? constant_of(g, conv.inputs[2]) : nullptr;
    const HostTensor* params[4];
    bool ok = w && w->dtype == DType::f32 && !w->shape.empty() &&
              (conv.inputs.size() < 3 || conv.inputs[2].empty() || b);
    for (int k = 0; k < 4 && ok; ++k) {
      params[k] = constant_of(g, bn.inputs[static_cast<std::size_t>(k + 1)]);
      ok = params[k] && params[k]->dtype == DType::f32 && params[k]->shape == Shape{w->shape[0]};
    }
    if (!ok || (b && (b->dtype != DType::f32 || b->shape != Shape{w->shape[0]}))) continue;
    auto [w2, b2] = fold_batch_norm(*w, b, params, bn.get_float("epsilon", 1e-5f));
    const std::string wn = conv.name + ".folded_weight", bname = conv.name + ".folded_bias";
    g.constants[wn] = std::make_shared<HostTensor>(std::move(w2));
    g.constants[bname] = std::make_shared<HostTensor>(std::move(b2));
    conv.inputs.resize(3);
    conv.inputs[1] = wn;
    conv.inputs[2] = bname;
    conv.outputs[0] = bn.outputs[0];
    removed[i] = true;
    report.add("folded BatchNormalization", "folded " + bn.label() + " into " + conv.label());
  }
  drop_removed(g, removed);
}

// x * 0.5 * (1 + erf(x / sqrt(2))) in any of the orders PyTorch exports it -> Gelu(x).
void fuse_gelu(Graph& g, OptimizerReport& report) {
  Uses uses(g);
  std::unordered_map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  std::vector<bool> removed(g.nodes.size(), false);
  auto other = [](const Node& n, const std::string& v) {
    return n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& div = g.nodes[i];
    if (removed[i] || div.op != "Div" || div.inputs.size() != 2 ||
        !is_scalar_constant(g, div.inputs[1], 1.41421356f, 1e-4f))
      continue;
    const std::string x = div.inputs[0];
    auto next = [&](std::size_t from, const char* op) -> std::optional<std::size_t> {
      const auto c = uses.only_consumer(g.nodes[from].outputs[0]);
      if (!c || g.nodes[*c].op != op || removed[*c]) return std::nullopt;
      return c;
    };
    const auto erf = next(i, "Erf");
    const auto add = erf ? next(*erf, "Add") : std::nullopt;
    if (!add || !is_scalar_constant(g, other(g.nodes[*add], g.nodes[*erf].outputs[0]), 1.0f)) continue;
    const auto mul1 = next(*add, "Mul");
    if (!mul1) continue;
    const auto mul2 = next(*mul1, "Mul");
    const std::string m1_other = other(g.nodes[*mul1], g.nodes[*add].outputs[0]);
    std::size_t last;
    if (m1_other == x && mul2 &&
        is_scalar_constant(g, other(g.nodes[*mul2], g.nodes[*mul1].outputs[0]), 0.5f)) {
      last = *mul2;  // (x * (1 + erf)) * 0.5
    } else if (is_scalar_constant(g, m1_other, 0.5f) && mul2 &&
               other(g.nodes[*mul2], g.nodes[*mul1].outputs[0]) == x) {
      last = *mul2;  // ((1 + erf) * 0.5) * x
    } else {
      continue;
    }
    Node gelu;
    gelu.op = "Gelu";
    gelu.name = div.name + ".gelu";
    gelu.inputs = {x};
    gelu.outputs = {g.nodes[last].outputs[0]};
    for (std::size_t k : {i, *erf, *add, *mul1}) removed[k] = true;
    report.add("fused GELU", "fused the erf GELU pattern from " + div.label() + " into one Gelu");
    g.nodes[last] = std::move(gelu);
  }
  drop_removed(g, removed);
}

// The dynamic int8 pattern ONNX Runtime's quantize_dynamic (and `cpudl quantize --mode dynamic`)
// writes for a MatMul or Gemm with constant weights:
//   q, s, z = DynamicQuantizeLinear(x);  i = MatMulInteger(q, Wq, z[, zero b_zero]);
//   f = Cast(i, FLOAT);  y = Mul(f, Mul(s, W_scale))  [ + bias ]
// -> cpudl.Int8MatMul(x, Wq, W_scale[, bias]), one pass over the int8 kernels. The
// DynamicQuantizeLinear may feed several products (Q, K and V share theirs); it is left for
// dead-node removal once none reads it.
void fuse_dynamic_quant_matmul(Graph& g, OptimizerReport& report) {
  Uses uses(g);
  std::unordered_map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  auto produced_by = [&](const std::string& v, const char* op) -> std::optional<std::size_t> {
    const auto it = producer.find(v);
    if (it == producer.end() || g.nodes[it->second].op != op) return std::nullopt;
    return it->second;
  };
  std::vector<bool> removed(g.nodes.size(), false);
  auto next = [&](std::size_t from, const char* op) -> std::optional<std::size_t> {
    const auto c = uses.only_consumer(g.nodes[from].outputs[0]);
    if (!c || removed[*c] || g.nodes[*c].op != op) return std::nullopt;
    return c;
  };
  auto other = [](const Node& n, const std::string& v) {
    return n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& mmi = g.nodes[i];
    if (removed[i] || mmi.op != "MatMulInteger" || mmi.inputs.size() < 3) continue;
    const auto dql = produced_by(mmi.inputs[0], "DynamicQuantizeLinear");
    if (!dql || g.nodes[*dql].outputs.size() != 3 || mmi.inputs[2] != g.nodes[*dql].outputs[2]) continue;
    const HostTensor* w = constant_of(g, mmi.inputs[1]);
    if (!w || w->dtype != DType::i8 || w->shape.size() != 2) continue;
    if (mmi.inputs.size() > 3 && !mmi.inputs[3].empty()) {
      const HostTensor* zb = constant_of(g, mmi.inputs[3]);
      if (!zb || zb->dtype != DType::i8) continue;
      const auto values = zb->as_int64();
      if (std::any_of(values.begin(), values.end(), [](std::int64_t v) { return v != 0; })) continue;
    }
    const auto cast = next(i, "Cast");
    if (!cast || g.nodes[*cast].get_int("to", 0) != 1) continue;
    const auto mul = next(*cast, "Mul");
    if (!mul || g.nodes[*mul].inputs.size() != 2) continue;
    const std::string scale_product = other(g.nodes[*mul], g.nodes[*cast].outputs[0]);
    const auto scale_mul = produced_by(scale_product, "Mul");
    if (!scale_mul || uses.only_consumer(scale_product) != *mul || g.nodes[*scale_mul].inputs.size() != 2)
      continue;
    const Node& sm = g.nodes[*scale_mul];
    const std::string x_scale = g.nodes[*dql].outputs[1];
    if (sm.inputs[0] != x_scale && sm.inputs[1] != x_scale) continue;
    const std::string w_scale_name = other(sm, x_scale);
    const HostTensor* w_scale = constant_of(g, w_scale_name);
    const std::int64_t n = w->shape[1];
    if (!w_scale || w_scale->dtype != DType::f32 || (w_scale->numel() != 1 && w_scale->numel() != n))
      continue;
    Node fused;
    fused.op = kInt8MatMulOp;
    fused.name = mmi.name.empty() ? g.nodes[*mul].name : mmi.name;
    fused.inputs = {g.nodes[*dql].inputs[0], mmi.inputs[1], w_scale_name};
    std::size_t last = *mul;
    if (const auto add = next(*mul, "Add"); add && g.nodes[*add].inputs.size() == 2) {
      const std::string bias = other(g.nodes[*add], g.nodes[*mul].outputs[0]);
      const HostTensor* b = constant_of(g, bias);
      if (b && b->dtype == DType::f32 && b->numel() == n && (b->shape.size() == 1 || b->shape.front() == 1)) {
        fused.inputs.push_back(bias);
        removed[*mul] = true;
        last = *add;
      }
    }
    fused.outputs = {g.nodes[last].outputs[0]};
    for (std::size_t k : {i, *cast, *scale_mul}) removed[k] = true;
    report.add("fused dynamic int8 MatMul", "fused " + g.nodes[*dql].label() + " + " + mmi.label() +
                                                " + Cast + Mul" + (fused.inputs.size() > 3 ? " + Add" : "") +
                                                " into one int8 product");
    g.nodes[last] = std::move(fused);
  }
  drop_removed(g, removed);
}

// The QDQ form of a quantised MatMul or Gemm (ONNX Runtime's quantize_static, `cpudl quantize
// --mode static`):
//   xd = DequantizeLinear(QuantizeLinear(x, s, z), s, z);  wd = DequantizeLinear(Wq, w_scale[, 0])
//   y = MatMul(xd, wd) | Gemm(xd, wd[, bias])
// -> cpudl.Int8MatMul(x, Wq as K x N, w_scale[, bias]) with the activation's s and z fixed
// (cpudl.a_scale, cpudl.a_zero): the same int8 product as the dynamic form, exact in int32, where
// the QDQ graph sums the dequantised floats (the two differ by float rounding only). Likewise a
// Conv between such pairs -> cpudl.Int8Conv(x, Wq as O x C/group x kh x kw, w_scale[, bias]),
// keeping the Conv's window attributes (oneDNN's int8 convolution, onednn::Int8Convolution).
void fuse_qdq_products(Graph& g, OptimizerReport& report, bool convolutions) {
  std::unordered_map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  auto produced_by = [&](const std::string& v, const char* op) -> const Node* {
    const auto it = producer.find(v);
    return it == producer.end() || g.nodes[it->second].op != op ? nullptr : &g.nodes[it->second];
  };
  auto scalar_of = [&](const Node& n, std::size_t i, DType t) -> const HostTensor* {
    if (n.inputs.size() <= i || n.inputs[i].empty()) return nullptr;
    const HostTensor* c = constant_of(g, n.inputs[i]);
    return c && c->dtype == t && c->numel() == 1 ? c : nullptr;
  };
  for (Node& n : g.nodes) {
    const bool gemm = n.op == "Gemm", conv = n.op == "Conv";
    if ((n.op != "MatMul" && !gemm && !conv) || n.inputs.size() < 2) continue;
    if (conv && !convolutions) continue;
    if (gemm &&
        (n.get_int("transA", 0) != 0 || n.get_float("alpha", 1) != 1.0f || n.get_float("beta", 1) != 1.0f))
      continue;
    // The activation: DequantizeLinear(QuantizeLinear(x, s, z), s, z), uint8, per tensor.
    const Node* dq = produced_by(n.inputs[0], "DequantizeLinear");
    const Node* q = dq ? produced_by(dq->inputs[0], "QuantizeLinear") : nullptr;
    if (!q || q->inputs.size() < 2 || dq->inputs.size() < 2) continue;
    const HostTensor* s = scalar_of(*q, 1, DType::f32);
    const HostTensor* s2 = scalar_of(*dq, 1, DType::f32);
    const HostTensor* z = scalar_of(*q, 2, DType::u8);
    const HostTensor* z2 = scalar_of(*dq, 2, DType::u8);
    if (!s || !s2 || s->data<float>()[0] != s2->data<float>()[0] || !(s->data<float>()[0] > 0.0f)) continue;
    if (!z || !z2 || z->data<std::uint8_t>()[0] != z2->data<std::uint8_t>()[0]) continue;
    // The weights: DequantizeLinear of a 2-D int8 constant, symmetric, scales along the output channel.
    const Node* wdq = produced_by(n.inputs[1], "DequantizeLinear");
    if (!wdq || wdq->inputs.size() < 2) continue;
    const HostTensor* w = constant_of(g, wdq->inputs[0]);
    const HostTensor* ws = constant_of(g, wdq->inputs[1]);
    if (!w || w->dtype != DType::i8 || w->shape.size() != (conv ? 4u : 2u) || !ws || ws->dtype != DType::f32)
      continue;
    if (wdq->inputs.size() > 2 && !wdq->inputs[2].empty()) {
      const HostTensor* wz = constant_of(g, wdq->inputs[2]);
      if (!wz || wz->dtype != DType::i8) continue;
      const auto zeros = wz->as_int64();
      if (std::any_of(zeros.begin(), zeros.end(), [](std::int64_t v) { return v != 0; })) continue;
    }
    // Without VNNI, oneDNN's int8 convolutions add u8 x s8 pairs in saturating int16: such a Conv
    // stays float between its QDQ pairs (the same numbers) unless its weights fit 7 bits.
    if (conv && !onednn::int8_convolution_exact(
                    std::span(w->data<std::int8_t>(), static_cast<std::size_t>(w->numel())))) {
      report.add("kept QDQ Conv in float", "kept " + n.label() +
                                               " in float between its QDQ pairs: its 8-bit weights would "
                                               "saturate int8 sums without VNNI");
      continue;
    }
    // One input channel (a grayscale image's first layer): VPDPBUSD sums groups of 4 channels, so
    // oneDNN's int8 kernel computes 4x the products it needs, and took 0.44 ms for LeNet-5's conv1 at
    // batch 64 (one thread, Zen 5 class) where the float planar convolution takes 0.20. The float
    // Conv between its QDQ pairs computes the same numbers (up to the float sums' rounding).
    if (conv && n.get_int("group", 1) == 1 && w->shape[1] == 1) {
      report.add("kept QDQ Conv in float", "kept " + n.label() +
                                               " in float between its QDQ pairs: one input channel, "
                                               "which int8 dot products pad to four");
      continue;
    }
    // A Conv's weights stay O x C/group x kh x kw (oneDNN reorders them once); a product's W must
    // be K x N, transposed when the file holds N x K.
    const bool transposed = !conv && gemm && n.get_int("transB", 0) != 0;
    const std::int64_t cols = w->shape[transposed || conv ? 0 : 1], k = w->numel() / cols;
    if (ws->numel() != 1) {
      const std::int64_t axis = wdq->get_int("axis", 1);
      if (ws->numel() != cols || axis != (transposed || conv ? 0 : 1)) continue;
    }
    std::string bias;
    if ((gemm || conv) && n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const HostTensor* b = constant_of(g, n.inputs[2]);
      if (!b || b->dtype != DType::f32 || b->numel() != cols || (b->shape.size() == 2 && b->shape[0] != 1))
        continue;
      bias = n.inputs[2];
    }
    std::string w_name = wdq->inputs[0];
    if (transposed) {
      w_name += ".k_by_n";
      if (!g.constants.count(w_name)) {
        auto t = std::make_shared<HostTensor>(HostTensor::zeros(DType::i8, {k, cols}));
        for (std::int64_t i = 0; i < k; ++i)
          for (std::int64_t j = 0; j < cols; ++j)
            t->data<std::int8_t>()[i * cols + j] = w->data<std::int8_t>()[j * k + i];
        g.constants[w_name] = t;
      }
    }
    const std::string label = n.label();
    Node fused;
    fused.op = conv ? kInt8ConvOp : kInt8MatMulOp;
    fused.name = n.name;
    if (conv) fused.attributes = n.attributes;  // the window
    fused.inputs = {q->inputs[0], w_name, wdq->inputs[1]};
    if (!bias.empty()) fused.inputs.push_back(bias);
    fused.outputs = {n.outputs[0]};
    fused.attributes["cpudl.a_scale"] = float_attribute(s->data<float>()[0]);
    fused.attributes["cpudl.a_zero"] = int_attribute(z->data<std::uint8_t>()[0]);
    n = std::move(fused);
    report.add(conv ? "fused QDQ int8 Conv" : "fused QDQ int8 MatMul",
               "fused the QuantizeLinear/DequantizeLinear pairs around " + label + " into one int8 product");
  }
}

}  // namespace

void optimize_graph(Graph& graph, OptimizerReport& report, const OptimizeOptions& options) {
  fold_constant_nodes(graph);
  remove_identities(graph, report);
  fold_batch_norms(graph, report);
  fuse_gelu(graph, report);
  fuse_dynamic_quant_matmul(graph, report);
  fuse_qdq_products(graph, report, options.int8_convolutions);
  remove_dead_nodes(graph);
}

void fuse_with_shapes(Graph& g, const std::map<std::string, ValueDesc>& descs, OptimizerReport& report) {
  auto desc = [&](const std::string& v) -> const ValueDesc* {
    const auto it = descs.find(v);
    return it == descs.end() ? nullptr : &it->second;
  };
  std::vector<bool> removed(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (removed[i]) continue;
    const std::string op = g.nodes[i].op;
    if (op == kInt8MatMulOp) {  // its int8 kernel applies a ReLU, nothing else
      const Uses uses(g);
      const auto c = uses.only_consumer(g.nodes[i].outputs[0]);
      if (c && !removed[*c] && g.nodes[*c].op == "Relu") {
        const std::string parts = g.nodes[i].label() + " + " + g.nodes[*c].label();
        g.nodes[i].attributes["cpudl.activation"] =
            Attribute{Attribute::Kind::s, 0, 0, "Relu", {}, {}, {}, nullptr, nullptr};
        g.nodes[i].outputs[0] = g.nodes[*c].outputs[0];
        g.nodes[*c] = std::move(g.nodes[i]);
        removed[i] = true;
        report.add("fused " + op + " epilogue", "fused " + parts);
      }
      continue;
    }
    const bool int8_conv = op == kInt8ConvOp;  // takes what a Conv takes: residual, Relu, Clip
    if (op != "Conv" && op != "Gemm" && op != "MatMul" && !int8_conv) continue;
    // A node fused earlier in this loop is met again at its new slot: a bias or residual after its
    // activation is not what its epilogue computes (they come before it).
    if (g.nodes[i].has("cpudl.activation")) continue;
    const ValueDesc* out = desc(g.nodes[i].outputs[0]);
    if (!out || out->dtype != DType::f32 || out->shape.empty()) continue;
    {
      const Node& n = g.nodes[i];
      const bool gemm_plain =
          op != "Gemm" || (n.get_float("alpha", 1) == 1 && n.get_float("beta", 1) == 1 &&
                           (n.inputs.size() < 3 || n.inputs[2].empty() ||
                            (desc(n.inputs[2]) && desc(n.inputs[2])->numel() == out->shape.back())));
      if (!gemm_plain) continue;
    }
    // The fused node moves to its last absorbed consumer's slot: everything that consumer reads
    // (a residual from another branch) is computed by then.
    std::size_t at = i;
    std::string parts = g.nodes[i].label();
    auto absorb = [&](std::size_t c) {
      g.nodes[at].outputs[0] = g.nodes[c].outputs[0];
      parts += " + " + g.nodes[c].label();
      Node moved = std::move(g.nodes[at]);
      removed[at] = true;
      g.nodes[c] = std::move(moved);
      at = c;
    };
    auto consumer = [&](const char* want) -> std::optional<std::size_t> {
      const Uses uses(g);
      const auto c = uses.only_consumer(g.nodes[at].outputs[0]);
      if (!c || removed[*c] || g.nodes[*c].op != want) return std::nullopt;
      return c;
    };
    auto other_input = [&](std::size_t c) {
      const Node& add = g.nodes[c];
      return add.inputs[0] == g.nodes[at].outputs[0] ? add.inputs[1] : add.inputs[0];
    };
    // MatMul + Add(a constant row of n) -> MatMul with a bias.
    if (op == "MatMul" && g.nodes[at].inputs.size() == 2) {
      if (const auto c = consumer("Add")) {
        const std::string other = other_input(*c);
        const HostTensor* bias = constant_of(g, other);
        const ValueDesc* sum = desc(g.nodes[*c].outputs[0]);
        if (bias && bias->dtype == DType::f32 && bias->numel() == out->shape.back() &&
            bias->shape.size() <= out->shape.size() && sum && sum->shape == out->shape) {
          g.nodes[at].inputs.push_back(other);
          absorb(*c);
        }
      }
    }
    // Conv + Add(a residual of the same shape): the residual is input 3 (Int8Conv's 4).
    const std::size_t residual_input = int8_conv ? 4 : 3;
    if ((op == "Conv" || int8_conv) && g.nodes[at].inputs.size() <= residual_input) {
      if (const auto c = consumer("Add")) {
        const std::string other = other_input(*c);
        const ValueDesc* r = desc(other);
        if (other != g.nodes[at].outputs[0] && r && r->dtype == DType::f32 && r->shape == out->shape &&
            !g.constants.count(other)) {
          g.nodes[at].inputs.resize(residual_input);
          g.nodes[at].inputs.push_back(other);
          absorb(*c);
        }
      }
    }
    // + Relu, or Clip with constant bounds.
    if (const auto c = consumer("Relu")) {
      g.nodes[at].attributes["cpudl.activation"] =
          Attribute{Attribute::Kind::s, 0, 0, "Relu", {}, {}, {}, nullptr, nullptr};
      absorb(*c);
    } else if (const auto c = consumer("Clip")) {
      const Node& act = g.nodes[*c];
      float lo = act.get_float("min", -INFINITY), hi = act.get_float("max", INFINITY);
      bool known = true;
      for (std::size_t k = 1; k < act.inputs.size() && k < 3; ++k) {
        if (act.inputs[k].empty()) continue;
        const HostTensor* t = constant_of(g, act.inputs[k]);
        known = known && t && t->numel() == 1;
        if (known) (k == 1 ? lo : hi) = t->as_float()[0];
      }
      if (known) {
        Node& n = g.nodes[at];
        n.attributes["cpudl.activation"] =
            Attribute{Attribute::Kind::s, 0, 0, "Clip", {}, {}, {}, nullptr, nullptr};
        n.attributes["cpudl.clip_min"] = float_attribute(lo);
        n.attributes["cpudl.clip_max"] = float_attribute(hi);
        absorb(*c);
      }
    } else {
      // + SiLU as exporters write it: x * Sigmoid(x), x read by exactly those two nodes.
      const Uses uses(g);
      const std::string& x = g.nodes[at].outputs[0];
      const auto it = uses.consumers.find(x);
      if (!uses.outputs.count(x) && it != uses.consumers.end() && it->second.size() == 2) {
        std::size_t sig = it->second[0], mul = it->second[1];
        if (g.nodes[sig].op != "Sigmoid") std::swap(sig, mul);
        const Node& s = g.nodes[sig];
        const Node& m = g.nodes[mul];
        const bool silu = !removed[sig] && !removed[mul] && s.op == "Sigmoid" && m.op == "Mul" &&
                          m.inputs.size() == 2 && uses.only_consumer(s.outputs[0]) == mul &&
                          ((m.inputs[0] == x && m.inputs[1] == s.outputs[0]) ||
                           (m.inputs[1] == x && m.inputs[0] == s.outputs[0]));
        if (silu) {
          g.nodes[at].attributes["cpudl.activation"] =
              Attribute{Attribute::Kind::s, 0, 0, "Silu", {}, {}, {}, nullptr, nullptr};
          parts += " + " + s.label();
          removed[sig] = true;
          absorb(mul);
        }
      }
    }
    if (at != i) report.add("fused " + op + " epilogue", "fused " + parts);
  }
  drop_removed(g, removed);
}

void keep_activations_in_int8(Graph& g, std::map<std::string, ValueDesc>& descs, OptimizerReport& report) {
  // A value can live in uint8 when it is made by an int8 convolution (or by a MaxPool of such a
  // value: the max of quantised numbers is the quantised max, so the pool keeps the scale) and
  // every reader takes it in uint8 at one scale and zero point:
  //   - an Int8Conv reading it as X, at that Int8Conv's activation parameters, which fix the value's;
  //   - an Int8Conv reading it as the residual, when that convolution's output is uint8 too (oneDNN's
  //     sum post-op reads the residual where the output goes, so both are bytes); the residual then
  //     enters the sum as its readers quantise it, one rounding where the float graph has none;
  //   - a MaxPool whose output stays uint8 at the same parameters.
  // A value read only as a residual (a downsample's output) has parameters only when the file gives
  // it a QDQ pair of its own (below); without one it stays float, and so does the convolution that
  // adds it. The conditions hold together (a residual and the output it is added into), so the
  // candidates are pruned until none changes.
  using Params = std::pair<float, std::int64_t>;
  const Uses uses(g);
  std::map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  auto single_output = [](const Node& n) {
    return n.outputs.size() == 1 || (n.op == "MaxPool" && n.outputs.size() == 2 && n.outputs[1].empty());
  };
  auto has_residual = [](const Node& n) { return n.inputs.size() > 4 && !n.inputs[4].empty(); };
  // A residual read through its own QDQ pair (the quantiser gives one to a downsample's output):
  // Int8Conv output v -> QuantizeLinear -> DequantizeLinear -> only this residual, with one
  // constant scalar scale and zero point. v can then be written in uint8 at those parameters and
  // added as it is, which is what the pair computes; the pair is dropped when it is.
  struct ThroughQdq {
    std::string value;  // v
    std::size_t quantize, dequantize;
  };
  std::map<std::size_t, ThroughQdq> through_qdq;  // the residual's convolution -> its pair
  std::map<std::string, Params> declared;         // v -> the pair's parameters
  std::map<std::string, std::size_t> adds_it;     // v -> the convolution adding it as its residual
  auto scalar_params = [&](const Node& n) -> std::optional<Params> {
    if (n.inputs.size() != 3) return std::nullopt;
    const HostTensor* sc = constant_of(g, n.inputs[1]);
    const HostTensor* z = constant_of(g, n.inputs[2]);
    if (!sc || !z || sc->dtype != DType::f32 || sc->numel() != 1 || z->dtype != DType::u8 || z->numel() != 1)
      return std::nullopt;
    return Params{sc->data<float>()[0], static_cast<std::int64_t>(z->data<std::uint8_t>()[0])};
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != kInt8ConvOp || !has_residual(n) || !producer.count(n.inputs[4])) continue;
    const std::size_t dq = producer.at(n.inputs[4]);
    const Node& d = g.nodes[dq];
    if (d.op != "DequantizeLinear" || !uses.only_consumer(n.inputs[4]) || !producer.count(d.inputs[0]))
      continue;
    const std::size_t q = producer.at(d.inputs[0]);
    const Node& qn = g.nodes[q];
    if (qn.op != "QuantizeLinear" || !uses.only_consumer(d.inputs[0]) || !producer.count(qn.inputs[0]))
      continue;
    const std::string& v = qn.inputs[0];
    const auto pd = scalar_params(d), pq = scalar_params(qn);
    const Node& made_by = g.nodes[producer.at(v)];
    if (!pd || pd != pq || made_by.op != kInt8ConvOp || has_residual(made_by) || !uses.only_consumer(v))
      continue;
    through_qdq[i] = ThroughQdq{v, q, dq};
    declared[v] = *pd;
    adds_it[v] = i;
  }
  std::set<std::string> alive;
  for (const Node& n : g.nodes)
    if ((n.op == kInt8ConvOp || n.op == "MaxPool") && single_output(n) && !uses.outputs.count(n.outputs[0]) &&
        uses.consumers.count(n.outputs[0]))
      alive.insert(n.outputs[0]);
  std::map<std::string, Params> params;
  for (bool changed = true; changed;) {
    changed = false;
    // Parameters, readers before writers (nodes are in topological order): from the Int8Convs
    // that read the value as X, and from the MaxPools that keep it.
    params.clear();
    for (std::size_t i = g.nodes.size(); i-- > 0;) {
      const Node& n = g.nodes[i];
      if (!single_output(n) || !alive.count(n.outputs[0])) continue;
      const std::string& v = n.outputs[0];
      std::optional<Params> p;
      bool agree = true;
      for (const std::size_t c : uses.consumers.at(v)) {
        const Node& r = g.nodes[c];
        std::optional<Params> q;
        if (r.op == kInt8ConvOp && r.inputs[0] == v)
          q = Params{r.get_float("cpudl.a_scale", 0.0f), r.get_int("cpudl.a_zero", 0)};
        else if (r.op == "MaxPool" && params.count(r.outputs[0]))
          q = params.at(r.outputs[0]);
        if (q && p && *p != *q) agree = false;
        if (q) p = q;
      }
      if (p && agree) params[v] = *p;
      if (declared.count(v)) params[v] = declared.at(v);
    }
    for (auto it = alive.begin(); it != alive.end();) {
      const std::string& v = *it;
      const Node& made_by = g.nodes[producer.at(v)];
      bool ok = params.count(v) > 0;
      // The writer: an Int8Conv adds a uint8 residual only; a MaxPool keeps its input's parameters.
      if (ok && made_by.op == kInt8ConvOp && has_residual(made_by)) {
        const auto t = through_qdq.find(producer.at(v));
        ok = alive.count(t != through_qdq.end() ? t->second.value : made_by.inputs[4]) > 0;
      }
      if (ok && made_by.op == "MaxPool")
        ok = params.count(made_by.inputs[0]) && params.at(made_by.inputs[0]) == params.at(v);
      for (const std::size_t c : uses.consumers.at(v)) {
        if (!ok) break;
        const Node& r = g.nodes[c];
        if (declared.count(v)) {  // its one reader, the QuantizeLinear of its pair
          ok = alive.count(g.nodes[adds_it.at(v)].outputs[0]) > 0;
          continue;
        }
        const auto reads = std::count(r.inputs.begin(), r.inputs.end(), v);
        if (r.op == kInt8ConvOp && reads == 1 && r.inputs[0] == v) continue;  // its parameters agreed above
        if (r.op == kInt8ConvOp && reads == 1 && has_residual(r) && r.inputs[4] == v &&
            alive.count(r.outputs[0]))
          continue;
        ok = r.op == "MaxPool" && reads == 1 && single_output(r) && alive.count(r.outputs[0]) > 0;
      }
      if (ok) {
        ++it;
      } else {
        it = alive.erase(it);
        changed = true;
      }
    }
  }
  int convs = 0, pools = 0, residuals = 0;
  std::vector<bool> removed(g.nodes.size(), false);
  for (const auto& [c, t] : through_qdq) {
    if (!alive.count(t.value)) continue;  // the pair stays, computing what it does in float
    g.nodes[c].inputs[4] = t.value;
    removed[t.quantize] = removed[t.dequantize] = true;
  }
  for (Node& n : g.nodes) {
    if (n.op == kInt8ConvOp && has_residual(n) && alive.count(n.inputs[4])) {
      const Params& r = params.at(n.inputs[4]);
      n.attributes["cpudl.residual_scale"] = float_attribute(r.first);
      n.attributes["cpudl.residual_zero"] = int_attribute(r.second);
      ++residuals;
    }
    if (!single_output(n) || !alive.count(n.outputs[0])) continue;
    const Params& p = params.at(n.outputs[0]);
    if (n.op == kInt8ConvOp) {
      n.attributes["cpudl.out_scale"] = float_attribute(p.first);
      n.attributes["cpudl.out_zero"] = int_attribute(p.second);
      ++convs;
    } else {
      ++pools;
    }
    descs.at(n.outputs[0]).dtype = DType::u8;
  }
  drop_removed(g, removed);
  if (convs > 0)
    report.add(
        "int8 activations",
        std::to_string(convs) +
            " int8 convolution output(s) stay uint8, requantised in the epilogue for the int8 "
            "convolutions that read them" +
            (residuals ? ", " + std::to_string(residuals) + " residual(s) added from uint8" : std::string()) +
            (pools ? ", " + std::to_string(pools) + " max pool(s) on uint8" : std::string()));
}

bool weights_stored_bf16(const Graph& g) {
  std::set<std::string> casts;  // outputs of Cast(BFLOAT16 constant, to = FLOAT)
  for (const Node& n : g.nodes) {
    if (n.op != "Cast" || n.inputs.size() != 1 || n.outputs.size() != 1 || n.get_int("to", 0) != 1) continue;
    const HostTensor* c = constant_of(g, n.inputs[0]);
    if (c && c->dtype == DType::bf16) casts.insert(n.outputs[0]);
  }
  for (const Node& n : g.nodes)
    if ((n.op == "Conv" || n.op == "Gemm" || n.op == "MatMul") && n.inputs.size() > 1 &&
        casts.count(n.inputs[1]))
      return true;
  return false;
}

void request_bf16(Graph& g, OptimizerReport& report) {
  int convs = 0, products = 0;
  for (Node& n : g.nodes) {
    if (n.op != "Conv" && n.op != "Gemm" && n.op != "MatMul") continue;
    n.attributes["cpudl.bf16"] = int_attribute(1);
    ++(n.op == "Conv" ? convs : products);
  }
  report.add("bf16", "bf16: " + std::to_string(convs) + " convolution(s) and " + std::to_string(products) +
                         " matrix product(s) compute in bf16 (f32 sums and outputs)");
}

void assign_layouts(Graph& g, std::map<std::string, ValueDesc>& descs, OptimizerReport& report) {
  // Layout codes as in onednn::ActivationLayout: 0 NCHW, 1 NHWC, 2 blocked.
  enum Layout : std::int64_t { nchw = 0, nhwc = 1, blocked = 2 };
  auto is_4d_f32 = [&](const std::string& v) {
    const auto it = descs.find(v);
    return !v.empty() && it != descs.end() && it->second.dtype == DType::f32 &&
           it->second.shape.size() == 4 && !g.constants.count(v);
  };
  auto channels = [&](const std::string& v) { return descs.at(v).shape[1]; };
  // The region's layout: blocked when every convolution's channels fit the block (a first layer
  // with fewer input channels than a block reads NCHW directly), else NHWC.
  const std::int64_t block = onednn::blocked_layout_channels();
  Layout region = blocked;
  bool any_conv = false;
  for (const Node& n : g.nodes) {
    if (n.op == kInt8ConvOp) {  // oneDNN's int8 convolutions read and write NHWC
      any_conv = true;
      region = nhwc;
      continue;
    }
    if (n.op != "Conv" || !is_4d_f32(n.inputs[0]) || !is_4d_f32(n.outputs[0])) continue;
    any_conv = true;
    const std::int64_t cin = channels(n.inputs[0]), cout = channels(n.outputs[0]);
    const bool first_layer = cin < block && n.get_int("group", 1) == 1;
    if (cout % block != 0 || (cin % block != 0 && !first_layer)) region = nhwc;
    // oneDNN's bf16 convolutions take plain activations (dense.h); NHWC is their fast one.
    if (n.get_int("cpudl.bf16", 0) != 0) region = nhwc;
  }
  if (!any_conv) return;

  std::map<std::string, Layout> layout;          // absent: NCHW
  std::map<std::string, std::string> converted;  // "value|layout" -> the converted value's name
  std::vector<Node> nodes;
  int reorders = 0;
  auto layout_of = [&](const std::string& v) {
    const auto it = layout.find(v);
    return it == layout.end() ? nchw : it->second;
  };
  auto set_int = [](Node& n, const char* key, std::int64_t value) {
    n.attributes[key] = int_attribute(value);
  };
  // The value `v` in layout `want`, converting it (once) just before the node being placed.
  auto ensure = [&](std::string& v, Layout want) {
    if (!is_4d_f32(v) || layout_of(v) == want) return;
    static const char* names[] = {"nchw", "nhwc", "blocked"};
    const std::string key = v + "|" + names[want];
    if (!converted.count(key)) {
      Node r;
      r.op = kReorderOp;
      r.name = v + ".to_" + names[want];
      r.inputs = {v};
      r.outputs = {r.name};
      set_int(r, "from", layout_of(v));
      set_int(r, "to", want);
      descs[r.name] = descs.at(v);
      layout[r.name] = want;
      converted[key] = r.name;
      nodes.push_back(std::move(r));
      ++reorders;
    }
    v = converted[key];
  };
  static const std::set<std::string> unary = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Erf",
                                              "Gelu", "Sqrt",      "Exp",  "Log",     "Neg"};
  // A Flatten of a channels-last or blocked value whose every reader is a Gemm with constant
  // weights, float or int8 (a CNN's classifier head): each sample's values are contiguous in any layout, so
  // the Flatten stays a view of them and the Gemms' weight columns are permuted once into the layout's order,
  // instead of reordering the activations on every run (for SimpleCNN's 32 x 26 x 26 map at batch 64, a 5.5
  // MB copy that took half the inference).
  std::map<std::string, std::vector<Node*>> readers;
  for (Node& n : g.nodes)
    for (const auto& in : n.inputs) readers[in].push_back(&n);
  std::set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  int permuted_heads = 0;
  auto flatten_into_constant_gemms = [&](const Node& f) {
    if (f.inputs.size() != 1 || f.outputs.size() != 1 || f.get_int("axis", 1) != 1 ||
        graph_outputs.count(f.outputs[0]) || readers[f.outputs[0]].empty())
      return false;
    const Shape& x = descs.at(f.inputs[0]).shape;
    const std::int64_t k = x[1] * x[2] * x[3];
    for (const Node* r : readers[f.outputs[0]]) {
      const bool int8 = r->op == kInt8MatMulOp;  // its W: int8, K x N
      if ((r->op != "Gemm" && !int8) || r->inputs.size() < 2 || r->inputs[0] != f.outputs[0] ||
          r->inputs[1] == f.outputs[0] || r->get_int("transA", 0) != 0 || !g.constants.count(r->inputs[1]))
        return false;
      const HostTensor& w = *g.constants.at(r->inputs[1]);
      if (w.dtype != (int8 ? DType::i8 : DType::f32) || w.shape.size() != 2 ||
          w.shape[!int8 && r->get_int("transB", 0) != 0 ? 1 : 0] != k)
        return false;
    }
    return true;
  };
  auto permute_gemm_weights = [&](const Node& f, Layout from) {
    const Shape& x = descs.at(f.inputs[0]).shape;
    const std::int64_t c = x[1], hw = x[2] * x[3], k = c * hw, b = from == blocked ? block : 1;
    std::vector<std::int64_t> position(static_cast<std::size_t>(k));  // NCHW index -> index in `from`
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < hw; ++i)
        position[static_cast<std::size_t>(ch * hw + i)] =
            from == nhwc ? i * c + ch : ((ch / b) * hw + i) * b + ch % b;
    static const char* names[] = {"nchw", "nhwc", "blocked"};
    for (Node* r : readers[f.outputs[0]]) {
      const HostTensor& w = *g.constants.at(r->inputs[1]);
      const bool trans_b = r->op == "Gemm" && r->get_int("transB", 0) != 0;  // N x K, else K x N
      const std::int64_t n = trans_b ? w.shape[0] : w.shape[1];
      const auto e = static_cast<std::int64_t>(dtype_size(w.dtype));
      auto permuted = std::make_shared<HostTensor>(HostTensor::zeros(w.dtype, w.shape));
      const std::byte* src = w.bytes.data();
      std::byte* dst = permuted->bytes.data();
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const std::int64_t p = position[static_cast<std::size_t>(kk)];
        if (!trans_b) {  // a row of N
          std::memcpy(dst + p * n * e, src + kk * n * e, static_cast<std::size_t>(n * e));
          continue;
        }
        for (std::int64_t j = 0; j < n; ++j)
          std::memcpy(dst + (j * k + p) * e, src + (j * k + kk) * e, static_cast<std::size_t>(e));
      }
      const std::string name = r->inputs[1] + ".for_" + names[from];
      if (descs.count(r->inputs[1])) descs[name] = descs.at(r->inputs[1]);
      g.constants[name] = std::move(permuted);
      r->inputs[1] = name;
    }
    ++permuted_heads;
  };
  static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div"};
  for (Node& n : g.nodes) {
    Layout out = nchw;
    if (n.op == kInt8ConvOp) {
      // An f32 input is quantised straight into NHWC from NCHW or NHWC (the image input needs no
      // reorder of its own); a u8 one comes from an Int8Conv, already NHWC.
      if (layout_of(n.inputs[0]) == blocked) ensure(n.inputs[0], nhwc);
      if (n.inputs.size() > 4) ensure(n.inputs[4], nhwc);
      set_int(n, "cpudl.src_layout", layout_of(n.inputs[0]));
      set_int(n, "cpudl.dst_layout", nhwc);
      out = nhwc;
    } else if (n.op == "Conv" && is_4d_f32(n.inputs[0]) && is_4d_f32(n.outputs[0])) {
      const bool first_layer = region == blocked && channels(n.inputs[0]) % block != 0;
      if (!first_layer)
        ensure(n.inputs[0], region);
      else
        ensure(n.inputs[0], nchw);
      if (n.inputs.size() > 3) ensure(n.inputs[3], region);
      set_int(n, "cpudl.src_layout", layout_of(n.inputs[0]));
      set_int(n, "cpudl.dst_layout", region);
      out = region;
    } else if ((n.op == "MaxPool" || n.op == "AveragePool") && layout_of(n.inputs[0]) != nchw &&
               n.outputs.size() == 1) {
      out = layout_of(n.inputs[0]);
      set_int(n, "cpudl.layout", out);
    } else if (n.op == "GlobalAveragePool" && layout_of(n.inputs[0]) != nchw) {
      set_int(n, "cpudl.layout",
              layout_of(n.inputs[0]));  // its N x C x 1 x 1 output is plain in every layout
    } else if (n.op == "Concat" && n.outputs.size() == 1 && is_4d_f32(n.outputs[0]) &&
               (n.get_int("axis", 0) == 1 || n.get_int("axis", 0) == -3) &&
               std::all_of(n.inputs.begin(), n.inputs.end(), is_4d_f32) &&
               std::any_of(n.inputs.begin(), n.inputs.end(),
                           [&](const std::string& v) { return layout_of(v) != nchw; }) &&
               (region == nhwc || std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) {
                  return channels(v) % block == 0;
                }))) {
      // Channels concatenate in NHWC (innermost) and in channel blocks that are all full.
      for (auto& in : n.inputs) ensure(in, region);
      set_int(n, "cpudl.layout", region);
      out = region;
    } else if (n.op == "Resize" && !n.inputs.empty() && n.outputs.size() == 1 && is_4d_f32(n.inputs[0]) &&
               layout_of(n.inputs[0]) != nchw && is_4d_f32(n.outputs[0]) &&
               descs.at(n.outputs[0]).shape[0] == descs.at(n.inputs[0]).shape[0] &&
               descs.at(n.outputs[0]).shape[1] == descs.at(n.inputs[0]).shape[1]) {
      out = layout_of(n.inputs[0]);  // it resizes H and W wherever they are stored
      set_int(n, "cpudl.layout", out);
    } else if (n.op == "Flatten" && !n.inputs.empty() && is_4d_f32(n.inputs[0]) &&
               layout_of(n.inputs[0]) != nchw && flatten_into_constant_gemms(n)) {
      permute_gemm_weights(n, layout_of(n.inputs[0]));  // the Flatten's 2-D output: no layout
    } else if (unary.count(n.op) && !n.inputs.empty()) {
      out = layout_of(n.inputs[0]);
      for (std::size_t k = 1; k < n.inputs.size(); ++k) ensure(n.inputs[k], nchw);
    } else if (binary.count(n.op) && n.inputs.size() == 2 && is_4d_f32(n.inputs[0]) &&
               is_4d_f32(n.inputs[1]) && descs.at(n.inputs[0]).shape == descs.at(n.inputs[1]).shape &&
               (layout_of(n.inputs[0]) != nchw || layout_of(n.inputs[1]) != nchw)) {
      ensure(n.inputs[0], region);
      ensure(n.inputs[1], region);
      out = region;
    } else {
      for (auto& in : n.inputs) ensure(in, nchw);
    }
    if (out != nchw)
      for (const auto& o : n.outputs) layout[o] = out;
    nodes.push_back(std::move(n));
  }
  // Graph outputs leave in NCHW: the producer writes a renamed value, converted into the output.
  for (const auto& o : g.outputs) {
    if (layout_of(o.name) == nchw) continue;
    const std::string inner = o.name + ".inner";
    for (Node& n : nodes) {
      for (auto& in : n.inputs)
        if (in == o.name) in = inner;
      for (auto& out : n.outputs)
        if (out == o.name) out = inner;
    }
    descs[inner] = descs.at(o.name);
    layout[inner] = layout_of(o.name);
    std::string v = inner;
    ensure(v, nchw);
    nodes.back().outputs[0] = o.name;
  }
  g.nodes = std::move(nodes);
  if (permuted_heads > 0)
    report.add("flatten in layout", std::to_string(permuted_heads) +
                                        " Flatten(s) of a channels-last or blocked value read as stored: the "
                                        "Gemm weights after them permuted to match");
  if (reorders > 0)
    report.add("layout reorders", std::to_string(reorders) + " reorder(s) at the edges of the " +
                                      (region == blocked ? "blocked (nChw" + std::to_string(block) + "c)"
                                                         : std::string("NHWC")) +
                                      " region");
}

void fuse_depthwise(Graph& g, const std::map<std::string, ValueDesc>& descs, OptimizerReport& report) {
  static const bool enabled = switched_on("CPUDL_FUSE_DEPTHWISE");
  if (!enabled) return;
  auto ints_are = [](const Node& n, const char* key, std::vector<std::int64_t> fallback, std::int64_t want) {
    for (std::int64_t v : n.get_ints(key, std::move(fallback)))
      if (v != want) return false;
    return true;
  };
  // A Conv with constant weights of `kernel` x `kernel`, no residual, between blocked activations.
  auto plain_conv = [&](const Node& n, std::int64_t kernel) -> const HostTensor* {
    if (n.op != "Conv" || n.inputs.size() < 2 || n.inputs.size() > 3 || n.outputs.size() != 1) return nullptr;
    if (n.get_int("cpudl.src_layout", 0) != 2 || n.get_int("cpudl.dst_layout", 0) != 2) return nullptr;
    if (n.get_string("auto_pad", "NOTSET") != "NOTSET" || !ints_are(n, "dilations", {1, 1}, 1))
      return nullptr;
    const HostTensor* w = constant_of(g, n.inputs[1]);
    if (!w || w->dtype != DType::f32 || w->shape.size() != 4 || w->shape[2] != kernel ||
        w->shape[3] != kernel)
      return nullptr;
    const bool bias_known = n.inputs.size() < 3 || n.inputs[2].empty() || constant_of(g, n.inputs[2]);
    return bias_known ? w : nullptr;
  };
  auto set = [](Node& n, const std::string& key, Attribute a) { n.attributes[key] = std::move(a); };
  std::vector<bool> removed(g.nodes.size(), false);
  const Uses uses(g);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& pw = g.nodes[i];
    const HostTensor* w1 = plain_conv(pw, 1);
    if (!w1 || pw.get_int("group", 1) != 1 || !ints_are(pw, "strides", {1, 1}, 1) ||
        !ints_are(pw, "pads", {0, 0, 0, 0}, 0))
      continue;
    const auto c = uses.only_consumer(pw.outputs[0]);
    if (!c || removed[*c]) continue;
    const Node& dw = g.nodes[*c];
    const HostTensor* w2 = plain_conv(dw, 3);
    const std::int64_t channels = w1->shape[0];
    const auto strides = dw.get_ints("strides", {1, 1});
    if (!w2 || dw.inputs[0] != pw.outputs[0] || dw.get_int("group", 1) != channels ||
        w2->shape[0] != channels || w2->shape[1] != 1 || !ints_are(dw, "pads", {0, 0, 0, 0}, 1) ||
        strides.size() != 2 || strides[0] != strides[1])
      continue;
    const auto x = descs.find(pw.inputs[0]);
    if (x == descs.end() || x->second.shape.size() != 4) continue;
    onednn::ConvShape shape;
    shape.batch = x->second.shape[0];
    shape.in_channels = x->second.shape[1];
    shape.height = x->second.shape[2];
    shape.width = x->second.shape[3];
    shape.out_channels = channels;
    shape.kernel_h = shape.kernel_w = 1;
    shape.layout = onednn::ActivationLayout::blocked;
    if (!onednn::depthwise_fusion_supported(shape, strides[0])) continue;

    Node fused;
    fused.op = kConvDepthwiseOp;
    fused.name = pw.name;
    fused.inputs = {pw.inputs[0], pw.inputs[1], pw.inputs.size() > 2 ? pw.inputs[2] : "", dw.inputs[1],
                    dw.inputs.size() > 2 ? dw.inputs[2] : ""};
    fused.outputs = dw.outputs;
    const std::pair<const char*, const char*> activation_keys[] = {
        {"cpudl.activation", "cpudl.dw_activation"},
        {"cpudl.clip_min", "cpudl.dw_clip_min"},
        {"cpudl.clip_max", "cpudl.dw_clip_max"}};
    for (const auto& [key, dw_key] : activation_keys) {
      if (const auto a = pw.attributes.find(key); a != pw.attributes.end()) set(fused, key, a->second);
      if (const auto a = dw.attributes.find(key); a != dw.attributes.end()) set(fused, dw_key, a->second);
    }
    set(fused, "cpudl.dw_stride", int_attribute(strides[0]));
    report.add("fused depthwise Conv", "fused " + pw.label() + " + " + dw.label());
    g.nodes[*c] = std::move(fused);
    removed[i] = true;
  }
  drop_removed(g, removed);
}

void remove_dead_nodes(Graph& g) {
  std::set<std::string> live;
  for (const auto& o : g.outputs) live.insert(o.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    for (const auto& o : g.nodes[i].outputs)
      if (live.count(o)) keep[i] = true;
    if (keep[i])
      for (const auto& in : g.nodes[i].inputs) live.insert(in);
  }
  std::vector<bool> removed(g.nodes.size());
  for (std::size_t i = 0; i < keep.size(); ++i) removed[i] = !keep[i];
  drop_removed(g, removed);
  for (auto it = g.constants.begin(); it != g.constants.end();) {
    bool graph_output = false;
    for (const auto& o : g.outputs) graph_output = graph_output || o.name == it->first;
    it = live.count(it->first) || graph_output ? std::next(it) : g.constants.erase(it);
  }
}

}  // namespace cpudl::infer
