// Plan compilation (shape inference, folding, fusion, kernel building, memory planning) and the
// allocation-free run loop.
#include "infer/plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "cpudl/error.h"
#include "infer/op_list.h"

namespace cpudl::infer {
namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kAlignment = 64;

std::size_t round_up(std::size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

std::size_t bytes_of(const ValueDesc& d) { return static_cast<std::size_t>(d.numel()) * dtype_size(d.dtype); }

OpSetup make_setup(const Node& node, std::int64_t opset, const std::map<std::string, ValueDesc>& descs,
                   const std::map<std::string, std::shared_ptr<const HostTensor>>& known) {
  OpSetup s{node, opset, {}, {}, {}, false, std::nullopt, false, {}};
  for (const auto& in : node.inputs) {
    if (in.empty()) {
      s.inputs.push_back(ValueDesc{DType::f32, {}, false});
      s.constants.push_back(nullptr);
      continue;
    }
    const auto d = descs.find(in);
    if (d == descs.end()) throw Error(node.label() + ": input '" + in + "' has no known shape");
    s.inputs.push_back(d->second);
    const auto k = known.find(in);
    s.constants.push_back(k == known.end() ? nullptr : k->second.get());
  }
  return s;
}

Kernel build(OpSetup& s) {
  const BuildFn fn = find_op(s.node.op);
  if (!fn) throw Error(s.node.label() + ": operator is not supported");
  Kernel k = fn(s);
  std::size_t named = 0;
  for (const auto& o : s.node.outputs) named += !o.empty();
  if (named > s.outputs.size())
    s.fail("has " + std::to_string(s.node.outputs.size()) + " outputs, expected at most " +
           std::to_string(s.outputs.size()));
  return k;
}

void check_input_shape(const ValueInfo& declared, const Shape& given) {
  if (declared.shape.empty()) return;  // no shape information in the model
  bool ok = declared.shape.size() == given.size();
  for (std::size_t i = 0; ok && i < given.size(); ++i)
    ok = declared.shape[i] < 0 || declared.shape[i] == given[i];
  if (!ok) {
    Shape shown = declared.shape;
    std::string text = "[";
    for (std::size_t i = 0; i < shown.size(); ++i)
      text += (i ? ", " : "") + (shown[i] < 0 ? std::string("?") : std::to_string(shown[i]));
    throw Error("input '" + declared.name + "' has shape " + shape_text(given) + ", the model expects " +
                text + "]");
  }
  for (std::int64_t d : given)
    if (d < 1)
      throw Error("input '" + declared.name + "' has shape " + shape_text(given) +
                  ": every dimension must be at least 1");
}

}  // namespace

double node_flops(const Node& node, const std::vector<ValueDesc>& in, const std::vector<ValueDesc>& out) {
  if (out.empty() || in.size() < 2) return 0;
  const double outputs = static_cast<double>(out[0].numel());
  if ((node.op == "Conv" || node.op == kInt8ConvOp) && in[1].shape.size() == 4) {
    const Shape& w = in[1].shape;
    return 2.0 * outputs * static_cast<double>(w[1] * w[2] * w[3]);
  }
  if (node.op == kConvDepthwiseOp && in[0].shape.size() == 4 && in[1].shape.size() == 4) {
    const double pointwise = 2.0 * static_cast<double>(in[0].numel()) * static_cast<double>(in[1].shape[0]);
    return pointwise + 2.0 * outputs * 9.0;
  }
  if (node.op == "ConvTranspose" && in[1].shape.size() == 4) {
    const Shape& w = in[1].shape;
    return 2.0 * static_cast<double>(in[0].numel()) * static_cast<double>(w[1] * w[2] * w[3]);
  }
  if (node.op == "Gemm" && in[0].shape.size() == 2) {
    const std::int64_t k = node.get_int("transA", 0) ? in[0].shape[0] : in[0].shape[1];
    return 2.0 * outputs * static_cast<double>(k);
  }
  if ((node.op == "MatMul" || node.op == "MatMulInteger" || node.op == kInt8MatMulOp) && !in[0].shape.empty())
    return 2.0 * outputs * static_cast<double>(in[0].shape.back());
  return 0;
}

Plan::Plan(const Graph& session_graph, const std::vector<Shape>& input_shapes, OptimizerReport& report,
           bool fuse) {
  Graph g = session_graph;
  if (input_shapes.size() != g.inputs.size())
    throw Error("the model has " + std::to_string(g.inputs.size()) + " input(s), " +
                std::to_string(input_shapes.size()) + " given");
  std::map<std::string, ValueDesc> descs;
  std::map<std::string, std::shared_ptr<const HostTensor>> known = g.constants;
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    check_input_shape(g.inputs[i], input_shapes[i]);
    descs[g.inputs[i].name] = ValueDesc{g.inputs[i].dtype, input_shapes[i], true};
  }
  for (const auto& [name, t] : known) descs[name] = ValueDesc{t->dtype, t->shape, true};

  // Pass 1: every shape, and every value computable before the run (constants, and Shape of
  // anything) folded by running its kernel now.
  std::vector<Node> remaining;
  for (const Node& node : g.nodes) {
    OpSetup s = make_setup(node, g.opset, descs, known);
    s.shape_pass = true;
    Kernel kernel = build(s);
    for (std::size_t o = 0; o < node.outputs.size() && o < s.outputs.size(); ++o)
      if (!node.outputs[o].empty()) descs[node.outputs[o]] = s.outputs[o];
    bool foldable = node.op == "Shape";
    if (!foldable) {
      foldable = true;
      for (std::size_t k = 0; k < s.inputs.size(); ++k)
        foldable = foldable && (!s.inputs[k].present || s.constants[k]);
    }
    if (!foldable) {
      remaining.push_back(node);
      continue;
    }
    std::vector<TensorView> in_views, out_views;
    for (std::size_t k = 0; k < s.inputs.size(); ++k)
      in_views.push_back(
          TensorView{s.inputs[k].dtype, &s.inputs[k].shape,
                     s.constants[k] ? const_cast<std::byte*>(s.constants[k]->bytes.data()) : nullptr});
    std::vector<std::shared_ptr<HostTensor>> results;
    for (const auto& d : s.outputs)
      results.push_back(std::make_shared<HostTensor>(HostTensor::zeros(d.dtype, d.shape)));
    for (std::size_t o = 0; o < results.size(); ++o)
      out_views.push_back(TensorView{results[o]->dtype, &results[o]->shape, results[o]->bytes.data()});
    if (s.output_aliases_input && !results[0]->bytes.empty())
      std::memcpy(results[0]->bytes.data(), s.constants[0]->bytes.data(), results[0]->bytes.size());
    else if (!s.output_aliases_input)
      kernel(in_views, out_views);
    for (std::size_t o = 0; o < node.outputs.size() && o < results.size(); ++o)
      if (!node.outputs[o].empty()) known[node.outputs[o]] = results[o];
  }
  g.nodes = std::move(remaining);
  g.constants = known;
  if (fuse) fuse_with_shapes(g, descs, report);
  remove_dead_nodes(g);
  if (fuse) {
    keep_activations_in_int8(g, descs, report);
    assign_layouts(g, descs, report);
    fuse_depthwise(g, descs, report);
  }

  // Pass 2: values, kernels, buffers.
  std::unordered_map<std::string, std::size_t> index;
  auto value_of = [&](const std::string& name) -> std::size_t {
    if (name.empty()) return kNone;
    const auto it = index.find(name);
    if (it != index.end()) return it->second;
    Value v;
    v.desc = descs.at(name);
    if (const auto k = g.constants.find(name); k != g.constants.end()) {
      v.storage = Storage::constant;
      v.constant = k->second->bytes.data();
      constants_.push_back(k->second);
    }
    values_.push_back(v);
    index[name] = values_.size() - 1;
    return values_.size() - 1;
  };
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const std::size_t v = value_of(g.inputs[i].name);
    values_[v].storage = Storage::input;
    values_[v].index = i;
  }
  std::vector<std::size_t> buffer_bytes;
  std::vector<std::pair<std::size_t, std::size_t>> lifetime;  // per buffer: first, last step
  // The last node reading each value (graph outputs: past the end), for in-place outputs.
  std::unordered_map<std::string, std::size_t> last_reader;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs) last_reader[in] = i;
  for (const auto& out : g.outputs) last_reader[out.name] = g.nodes.size();
  std::vector<int> values_per_buffer;
  for (const Node& node : g.nodes) {
    OpSetup s = make_setup(node, g.opset, descs, g.constants);
    Step step;
    step.kernel = build(s);
    const std::size_t at = steps_.size();
    for (const auto& in : node.inputs) {
      const std::size_t v = value_of(in);
      step.inputs.push_back(v);
      if (v != kNone && values_[v].storage == Storage::arena)
        lifetime[values_[v].index].second = std::max(lifetime[values_[v].index].second, at);
    }
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {
      const std::size_t v = value_of(node.outputs[o]);
      step.outputs.push_back(v);
      if (v == kNone) continue;
      values_[v].desc = s.outputs.at(o);
      if (o == 0 && s.output_aliases_input) {
        const Value& src = values_[step.inputs[0]];
        values_[v].storage = src.storage;
        values_[v].index = src.index;
        values_[v].constant = src.constant;
        if (src.storage == Storage::arena) ++values_per_buffer[src.index];
        continue;
      }
      if (o == 0 && s.in_place_input) {
        const std::size_t k = *s.in_place_input;
        const std::string& name = node.inputs.at(k);
        const std::size_t in = step.inputs[k];
        const bool read_once =
            std::count(node.inputs.begin(), node.inputs.end(), name) == 1 && last_reader.at(name) == at;
        if (read_once && values_[in].storage == Storage::arena && values_per_buffer[values_[in].index] == 1 &&
            values_[in].desc.dtype == values_[v].desc.dtype &&
            bytes_of(values_[in].desc) == bytes_of(values_[v].desc)) {
          values_[v].storage = Storage::arena;
          values_[v].index = values_[in].index;
          ++values_per_buffer[values_[v].index];
          continue;
        }
      }
      values_[v].storage = Storage::arena;
      values_[v].index = buffer_bytes.size();
      buffer_bytes.push_back(round_up(std::max<std::size_t>(bytes_of(values_[v].desc), 1)));
      lifetime.emplace_back(at, at);
      values_per_buffer.push_back(1);
    }
    stats_.flops += node_flops(node, s.inputs, s.outputs);
    ++stats_.ops[node.op];
    if (!s.implementation.empty())
      stats_.implementations.push_back(
          {node.name.empty() ? node.label() : node.name, node.op, s.implementation});
    profile_.push_back(StepProfile{node.op, node.name, node_flops(node, s.inputs, s.outputs), 0, 0});
    steps_.push_back(std::move(step));
  }
  for (const auto& out : g.outputs) {
    if (!descs.count(out.name)) throw Error("graph output '" + out.name + "' is never computed");
    const std::size_t v = value_of(out.name);
    output_values_.push_back(v);
    output_descs_.push_back(values_[v].desc);
    if (values_[v].storage == Storage::arena) lifetime[values_[v].index].second = steps_.size();
  }
  stats_.steps = steps_.size();

  // Greedy by size: the largest buffers first, each at the lowest offset free over its lifetime.
  std::vector<std::size_t> order(buffer_bytes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return buffer_bytes[a] > buffer_bytes[b]; });
  buffer_offsets_.assign(buffer_bytes.size(), 0);
  std::vector<std::size_t> placed;
  for (std::size_t b : order) {
    std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) of overlapping lifetimes
    for (std::size_t p : placed)
      if (lifetime[p].first <= lifetime[b].second && lifetime[b].first <= lifetime[p].second)
        taken.emplace_back(buffer_offsets_[p], buffer_offsets_[p] + buffer_bytes[p]);
    std::sort(taken.begin(), taken.end());
    std::size_t offset = 0;
    for (const auto& [lo, hi] : taken) {
      if (offset + buffer_bytes[b] <= lo) break;
      offset = std::max(offset, hi);
    }
    buffer_offsets_[b] = offset;
    stats_.arena_bytes = std::max(stats_.arena_bytes, offset + buffer_bytes[b]);
    stats_.unplanned_bytes += buffer_bytes[b];
    placed.push_back(b);
  }
  if (stats_.arena_bytes > 0) {
    auto* memory = static_cast<std::byte*>(std::aligned_alloc(kAlignment, round_up(stats_.arena_bytes)));
    if (!memory)
      throw Error("cannot allocate the plan's " + std::to_string(stats_.arena_bytes) + "-byte arena");
    arena_ = std::unique_ptr<std::byte[], void (*)(std::byte*)>(memory, [](std::byte* p) { std::free(p); });
  }
  std::size_t widest = 0;
  for (const Step& s : steps_) widest = std::max({widest, s.inputs.size(), s.outputs.size()});
  scratch_in_.resize(widest);
  scratch_out_.resize(widest);
}

void* Plan::address(std::size_t v, std::span<const TensorView> inputs) const {
  const Value& value = values_[v];
  switch (value.storage) {
    case Storage::constant:
      return const_cast<void*>(value.constant);
    case Storage::input:
      return inputs[value.index].data;
    case Storage::arena:
      return arena_.get() + buffer_offsets_[value.index];
  }
  return nullptr;
}

void Plan::run(std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    for (std::size_t k = 0; k < step.inputs.size(); ++k) {
      const std::size_t v = step.inputs[k];
      scratch_in_[k] = v == kNone
                           ? TensorView{}
                           : TensorView{values_[v].desc.dtype, &values_[v].desc.shape, address(v, inputs)};
    }
    for (std::size_t k = 0; k < step.outputs.size(); ++k) {
      const std::size_t v = step.outputs[k];
      scratch_out_[k] = v == kNone
                            ? TensorView{}
                            : TensorView{values_[v].desc.dtype, &values_[v].desc.shape, address(v, inputs)};
    }
    const std::span<const TensorView> in(scratch_in_.data(), step.inputs.size());
    const std::span<const TensorView> out(scratch_out_.data(), step.outputs.size());
    if (profiling_) {
      const auto start = std::chrono::steady_clock::now();
      step.kernel(in, out);
      profile_[i].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++profile_[i].calls;
    } else {
      step.kernel(in, out);
    }
  }
  for (std::size_t o = 0; o < output_values_.size(); ++o)
    if (const std::size_t bytes = bytes_of(values_[output_values_[o]].desc); bytes > 0)
      std::memcpy(outputs[o].data, address(output_values_[o], inputs), bytes);
}

}  // namespace cpudl::infer
