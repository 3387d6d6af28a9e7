// Plan compilation (shape inference, folding, fusion, kernel building, memory planning) and the
// allocation-free run loop.
#include "infer/plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "infer/op_list.h"

namespace cpudl::infer {
namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kAlignment = 64;

std::size_t round_up(std::size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

std::size_t bytes_of(const ValueDesc& d) { return static_cast<std::size_t>(d.numel()) * dtype_size(d.dtype); }

using ConstantMap = std::map<std::string, std::shared_ptr<const HostTensor>>;

// `provisional`: for an operator that reads bounded values, the small integer values computed at
// the bounds (a Reshape's target from a Shape of a bounded value): what it is planned for.
OpSetup make_setup(const Node& node, const Graph& g, const PlanOptions& options,
                   const std::map<std::string, ValueDesc>& descs, const ConstantMap& known,
                   const ConstantMap* provisional = nullptr) {
  OpSetup s{node, g.opset, {}, {}, {}, false, std::nullopt, false, {}, false, options.max_loop_iterations};
  for (const auto& in : node.inputs) {
    if (in.empty()) {
      s.inputs.push_back(ValueDesc{DType::f32, {}, false});
      s.constants.push_back(nullptr);
      continue;
    }
    const auto d = descs.find(in);
    if (d == descs.end()) throw Error(node.label() + ": input '" + in + "' has no known shape");
    s.inputs.push_back(d->second);
    auto k = known.find(in);
    if (k == known.end() && provisional) {
      k = provisional->find(in);
      if (k == provisional->end()) k = known.end();
    }
    s.constants.push_back(k == known.end() ? nullptr : k->second.get());
  }
  return s;
}

bool reads_bounded(const Node& node, const std::map<std::string, ValueDesc>& descs) {
  for (const auto& in : node.inputs)
    if (const auto d = in.empty() ? descs.end() : descs.find(in); d != descs.end() && d->second.bounded)
      return true;
  return false;
}

// Integer values small enough to be shape arguments: a rebuilt step is given them as constants.
constexpr std::int64_t kMaxShapeArgument = 64;
bool shape_argument(DType t, const Shape& shape) {  // int64, int32, or BOOL masks between them
  return (t == DType::i64 || t == DType::i32 || t == DType::i8) && shape_numel(shape) <= kMaxShapeArgument;
}

std::int64_t integer_at(DType t, const void* data, std::int64_t i) {
  if (t == DType::i64) return static_cast<const std::int64_t*>(data)[i];
  if (t == DType::i32) return static_cast<const std::int32_t*>(data)[i];
  return static_cast<const std::int8_t*>(data)[i];
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

// A step too small to share: a parallel region's fork and join (~3-5 us on two threads of a
// virtual machine, where waking the other thread is a futex call each way) costs more than the
// second thread saves. LeNet-5 at batch 1 (its 5x5 convolutions 0.24 and 0.48 MFLOP): 16 us on one
// thread, 32 us on two, every op slower. A step under both bounds runs on the calling thread;
// memory-bound products (an MLP's weights) stay shared by their bytes. Twice these bounds left
// LeNet-5's 6-channel max pool alone at batch 16 (300 KB, slow per byte) and the run 1.6x slower.
constexpr double kSharedStepFlops = 1e6;
constexpr std::size_t kSharedStepBytes = 64 << 10;
bool small_step(double flops, const std::vector<ValueDesc>& in, const std::vector<ValueDesc>& out) {
  std::size_t bytes = 0;
  for (const auto& d : in) bytes += bytes_of(d);
  for (const auto& d : out) bytes += bytes_of(d);
  return flops < kSharedStepFlops && bytes < kSharedStepBytes;
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
           const PlanOptions& options, const std::vector<bool>& bounded_inputs)
    : options_(options) {
  Graph g = session_graph;
  if (input_shapes.size() != g.inputs.size())
    throw Error("the model has " + std::to_string(g.inputs.size()) + " input(s), " +
                std::to_string(input_shapes.size()) + " given");
  std::map<std::string, ValueDesc> descs;
  std::map<std::string, std::shared_ptr<const HostTensor>> known = g.constants;
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    if (bounded_inputs.empty()) check_input_shape(g.inputs[i], input_shapes[i]);  // a model's, not a branch's
    descs[g.inputs[i].name] =
        ValueDesc{g.inputs[i].dtype, input_shapes[i], true, i < bounded_inputs.size() && bounded_inputs[i]};
  }
  for (const auto& [name, t] : known) descs[name] = ValueDesc{t->dtype, t->shape, true};

  // Pass 1: every shape, and every value computable before the run (constants, and Shape of
  // anything) folded by running its kernel now.
  std::vector<Node> remaining;
  ConstantMap provisional;  // small integer values computed at the bounds (make_setup)
  for (const Node& node : g.nodes) {
    const bool bounded_inputs = reads_bounded(node, descs);
    OpSetup s = make_setup(node, g, options, descs, known, bounded_inputs ? &provisional : nullptr);
    s.shape_pass = true;
    Kernel kernel = build(s);
    bool all_known = true, all_available = true;
    for (std::size_t k = 0; k < s.inputs.size(); ++k) {
      if (!s.inputs[k].present) continue;
      all_known = all_known && known.count(node.inputs[k]);
      all_available = all_available && s.constants[k];
    }
    bool foldable = !bounded_inputs && (node.op == "Shape" || all_known);
    for (std::size_t o = 0; o < node.outputs.size() && o < s.outputs.size(); ++o) {
      if (node.outputs[o].empty()) continue;
      ValueDesc d = s.outputs[o];
      d.bounded = !foldable && (d.bounded || bounded_inputs || s.sets_output_shapes);
      descs[node.outputs[o]] = d;
    }
    // A small integer result computed from the bounds (Shape of a bounded value, and what is
    // computed from it): kept for planning the bounded operators that read it, never folded.
    bool evaluate = foldable;
    if (!foldable && bounded_inputs && !s.sets_output_shapes && (all_available || node.op == "Shape")) {
      evaluate = !s.outputs.empty();
      for (const auto& d : s.outputs) evaluate = evaluate && shape_argument(d.dtype, d.shape);
    }
    if (!foldable) remaining.push_back(node);
    if (!evaluate) continue;
    std::vector<TensorView> in_views, out_views;
    for (std::size_t k = 0; k < s.inputs.size(); ++k)
      in_views.push_back(
          TensorView{s.inputs[k].dtype, &s.inputs[k].shape,
                     s.constants[k] ? const_cast<std::byte*>(s.constants[k]->bytes.data()) : nullptr});
    std::vector<std::shared_ptr<HostTensor>> results;
    for (const auto& d : s.outputs)
      results.push_back(std::make_shared<HostTensor>(HostTensor::zeros(d.dtype, d.shape)));
    for (std::size_t o = 0; o < results.size(); ++o)
      out_views.push_back(TensorView{results[o]->dtype, &results[o]->shape, results[o]->bytes.data(),
                                     s.sets_output_shapes ? &results[o]->shape : nullptr});
    if (s.output_aliases_input && !results[0]->bytes.empty())
      std::memcpy(results[0]->bytes.data(), s.constants[0]->bytes.data(), results[0]->bytes.size());
    else if (!s.output_aliases_input)
      kernel(in_views, out_views);
    for (std::size_t o = 0; o < node.outputs.size() && o < results.size(); ++o) {
      if (node.outputs[o].empty()) continue;
      results[o]->bytes.resize(static_cast<std::size_t>(results[o]->numel()) * dtype_size(results[o]->dtype));
      if (foldable) {
        descs[node.outputs[o]].shape = results[o]->shape;  // a data-dependent size, now known
        known[node.outputs[o]] = results[o];
      } else {
        provisional[node.outputs[o]] = results[o];
      }
    }
  }
  g.nodes = std::move(remaining);
  g.constants = known;
  if (options.fuse) fuse_with_shapes(g, descs, report);
  remove_dead_nodes(g);
  if (options.fuse) {
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
      v.host = k->second.get();
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
    input_values_.push_back(v);
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
    const bool bounded_inputs = reads_bounded(node, descs);
    OpSetup s = make_setup(node, g, options, descs, g.constants, bounded_inputs ? &provisional : nullptr);
    Step step;
    step.kernel = build(s);
    step.sets_output_shapes = s.sets_output_shapes;
    step.bounded = bounded_inputs || s.sets_output_shapes;
    if (step.bounded) step.node = std::make_shared<const Node>(node);
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
      values_[v].desc.bounded = values_[v].desc.bounded || step.bounded;
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
    const double flops = node_flops(node, s.inputs, s.outputs);
    step.one_thread = !step.bounded && small_step(flops, s.inputs, s.outputs);
    stats_.flops += flops;
    ++stats_.ops[node.op];
    if (!s.implementation.empty())
      stats_.implementations.push_back(
          {node.name.empty() ? node.label() : node.name, node.op, s.implementation});
    profile_.push_back(StepProfile{node.op, node.name, flops, 0, 0});
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
  for (const Value& v : values_) run_shapes_.push_back(v.desc.shape);
  buffer_bytes_ = std::move(buffer_bytes);
  opset_ = g.opset;
}

bool Plan::has_bounded_outputs() const {
  for (const auto& d : output_descs_)
    if (d.bounded) return true;
  return false;
}

void Plan::copy_output(std::size_t o, void* destination) const {
  const std::size_t v = output_values_.at(o);
  const std::size_t bytes =
      static_cast<std::size_t>(shape_numel(run_shapes_[v])) * dtype_size(values_[v].desc.dtype);
  if (bytes > 0) std::memcpy(destination, address(v, run_inputs_), bytes);
}

void Plan::rebuild_if_changed(Step& step, std::span<const TensorView> inputs) {
  signature_.clear();
  for (const std::size_t v : step.inputs) {
    if (v == kNone) {
      signature_.push_back(-1);
      continue;
    }
    const Shape& shape = run_shapes_[v];
    signature_.push_back(static_cast<std::int64_t>(shape.size()));
    signature_.insert(signature_.end(), shape.begin(), shape.end());
    if (values_[v].storage != Storage::constant && shape_argument(values_[v].desc.dtype, shape)) {
      const std::int64_t n = shape_numel(shape);
      const void* data = address(v, inputs);
      for (std::int64_t i = 0; i < n; ++i) signature_.push_back(integer_at(values_[v].desc.dtype, data, i));
    }
  }
  if (signature_ == step.built_for) return;
  const Node& node = *step.node;
  OpSetup s{node, opset_, {}, {}, {}, false, std::nullopt, false, {}, false, options_.max_loop_iterations};
  std::vector<std::shared_ptr<HostTensor>> run_values;
  for (const std::size_t v : step.inputs) {
    if (v == kNone) {
      s.inputs.push_back(ValueDesc{DType::f32, {}, false});
      s.constants.push_back(nullptr);
      continue;
    }
    ValueDesc d = values_[v].desc;
    d.shape = run_shapes_[v];
    s.inputs.push_back(d);
    if (values_[v].storage == Storage::constant) {
      s.constants.push_back(values_[v].host);
    } else if (shape_argument(d.dtype, d.shape)) {
      auto t = std::make_shared<HostTensor>(HostTensor::zeros(d.dtype, d.shape));
      if (!t->bytes.empty()) std::memcpy(t->bytes.data(), address(v, inputs), t->bytes.size());
      s.constants.push_back(t.get());
      run_values.push_back(std::move(t));
    } else {
      s.constants.push_back(nullptr);
    }
  }
  Kernel kernel = build(s);
  for (std::size_t o = 0; o < step.outputs.size() && o < s.outputs.size(); ++o) {
    const std::size_t v = step.outputs[o];
    if (v == kNone) continue;
    const std::size_t need = bytes_of(s.outputs[o]), bound = bytes_of(values_[v].desc);
    if (need > bound)
      throw Error(node.label() + ": output '" + node.outputs[o] + "' has shape " +
                  shape_text(s.outputs[o].shape) + " in this run, larger than the " +
                  shape_text(values_[v].desc.shape) + " it was planned for");
    run_shapes_[v] = s.outputs[o].shape;
  }
  step.kernel = std::move(kernel);
  step.run_values = std::move(run_values);
  step.built_for = signature_;
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
  run_inputs_.assign(inputs.begin(), inputs.end());
  for (std::size_t i = 0; i < input_values_.size();
       ++i)  // (views of an input share its storage, not its shape)
    if (values_[input_values_[i]].desc.bounded) run_shapes_[input_values_[i]] = *inputs[i].shape;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    if (step.bounded && !step.sets_output_shapes) rebuild_if_changed(step, inputs);
    for (std::size_t k = 0; k < step.inputs.size(); ++k) {
      const std::size_t v = step.inputs[k];
      scratch_in_[k] =
          v == kNone ? TensorView{} : TensorView{values_[v].desc.dtype, &run_shapes_[v], address(v, inputs)};
    }
    for (std::size_t k = 0; k < step.outputs.size(); ++k) {
      const std::size_t v = step.outputs[k];
      scratch_out_[k] = v == kNone ? TensorView{}
                                   : TensorView{values_[v].desc.dtype, &run_shapes_[v], address(v, inputs),
                                                step.sets_output_shapes ? &run_shapes_[v] : nullptr};
    }
    const std::span<const TensorView> in(scratch_in_.data(), step.inputs.size());
    const std::span<const TensorView> out(scratch_out_.data(), step.outputs.size());
    const std::optional<ThreadScope> alone =
        step.one_thread && compute_threads() > 1 ? std::optional<ThreadScope>(1) : std::nullopt;
    if (profiling_) {
      const auto start = std::chrono::steady_clock::now();
      step.kernel(in, out);
      profile_[i].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++profile_[i].calls;
      if (alone) ++profile_[i].alone_calls;
    } else {
      step.kernel(in, out);
    }
  }
  for (std::size_t o = 0; o < output_values_.size() && o < outputs.size(); ++o)
    copy_output(o, outputs[o].data);
}

}  // namespace cpudl::infer
