// InferenceSession: the loaded graph, optimised once, and a plan per input shape.
#include <functional>
#include <mutex>

#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "infer/onnx_loader.h"
#include "infer/op_registry.h"
#include "infer/optimizer.h"
#include "infer/plan.h"

namespace cpudl {

struct InferenceSession::Impl {
  std::filesystem::path path;
  infer::Graph loaded, graph;
  infer::OptimizerReport report;
  std::vector<ModelValue> inputs, outputs;
  // Plans by thread count and input shapes: a plan splits its work by the count it was made for
  // (oneDNN fixes it at primitive creation), so a governor that lowers the count gets a plan of its
  // own rather than a plan that starts the old count's threads.
  std::map<std::pair<int, std::vector<Shape>>, std::unique_ptr<infer::Plan>> plans;
  std::map<std::vector<Shape>, infer::OptimizerReport> plan_reports;
  bool optimize = true, profiling = false;
  std::int64_t max_loop_iterations = InferenceOptions::kDefaultMaxLoopIterations;
  int threads = 0;  // 0: the caller's compute_threads()
  std::mutex mutex;
  // The last plan used and its input shapes: repeated runs of one shape skip the lookup (and the
  // vector of shapes it would build).
  infer::Plan* last_plan = nullptr;
  std::vector<Shape> last_shapes;
  int last_threads = 0;
  std::vector<infer::TensorView> in_views, out_views;

  void check_inputs(const std::vector<Tensor>& given) const {
    if (given.size() != inputs.size())
      throw Error(path.string() + ": the model takes " + std::to_string(inputs.size()) + " input(s), " +
                  std::to_string(given.size()) + " given");
    for (std::size_t i = 0; i < given.size(); ++i) {
      if (!given[i].defined()) throw Error("input '" + inputs[i].name + "' is undefined");
      if (given[i].dtype() != inputs[i].dtype)
        throw Error("input '" + inputs[i].name + "' is " + std::string(dtype_name(given[i].dtype())) +
                    ", the model expects " + std::string(dtype_name(inputs[i].dtype)));
    }
  }

  infer::Plan& plan_for_inputs(const std::vector<Tensor>& given) {
    bool same =
        last_plan != nullptr && last_shapes.size() == given.size() && last_threads == compute_threads();
    for (std::size_t i = 0; same && i < given.size(); ++i) same = given[i].shape() == last_shapes[i];
    if (same) return *last_plan;
    std::vector<Shape> shapes;
    for (const auto& t : given) shapes.push_back(t.shape());
    last_plan = &plan_for(shapes);
    last_shapes = shapes;
    last_threads = compute_threads();
    return *last_plan;
  }

  // Runs the plan on contiguous inputs into checked outputs.
  void execute(infer::Plan& plan, const std::vector<Tensor>& given, std::vector<Tensor>& outputs) {
    in_views.resize(given.size());
    for (std::size_t i = 0; i < given.size(); ++i)
      in_views[i] = infer::TensorView{given[i].dtype(), &given[i].shape(), given[i].raw_data()};
    const auto& descs = plan.output_descs();
    if (outputs.size() != descs.size())
      throw Error("run_into: " + std::to_string(outputs.size()) + " output tensor(s) given, the model has " +
                  std::to_string(descs.size()));
    out_views.resize(descs.size());
    for (std::size_t o = 0; o < descs.size(); ++o) {
      if (descs[o].bounded)
        throw Error("run_into: output '" + this->outputs.at(o).name +
                    "' has a data-dependent shape (at most " + shape_text(descs[o].shape) + "): use run()");
      const Tensor& t = outputs[o];
      if (!t.defined() || !t.is_contiguous() || t.dtype() != descs[o].dtype || t.shape() != descs[o].shape)
        throw Error("run_into: output " + std::to_string(o) + " must be a contiguous " +
                    std::string(dtype_name(descs[o].dtype)) + " tensor of shape " +
                    shape_text(descs[o].shape));
      out_views[o] = infer::TensorView{t.dtype(), &descs[o].shape, t.raw_data()};
    }
    plan.run(in_views, out_views);
  }

  infer::Plan& plan_for(const std::vector<Shape>& shapes) {
    const std::pair<int, std::vector<Shape>> key{compute_threads(), shapes};
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;
    infer::OptimizerReport r;
    const infer::PlanOptions options{optimize, max_loop_iterations};
    it = plans.emplace(key, std::make_unique<infer::Plan>(graph, shapes, r, options)).first;
    plan_reports[shapes] = r;
    it->second->set_profiling(profiling);
    return *it->second;
  }
};

InferenceSession::InferenceSession(const std::filesystem::path& model, InferenceOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = model;
  impl_->loaded = infer::load_onnx(model);
  impl_->graph = impl_->loaded;
  impl_->optimize = options.optimize;
  if (options.threads < 0 || options.threads > 4096)
    throw UsageError("InferenceOptions::threads " + std::to_string(options.threads) +
                     ": expected 0 (the default) to 4096");
  impl_->threads = options.threads;
  if (options.max_loop_iterations < 1)
    throw UsageError("InferenceOptions::max_loop_iterations " + std::to_string(options.max_loop_iterations) +
                     ": expected at least 1");
  impl_->max_loop_iterations = options.max_loop_iterations;
  impl_->profiling = options.profile || op_profiling_enabled();
  if (options.bf16) onednn::require_bf16_compute();
  const bool bf16 = options.bf16 || (options.follow_bf16_weights && onednn::bf16_compute_available() &&
                                     infer::weights_stored_bf16(impl_->loaded));
  if (options.optimize) infer::optimize_graph(impl_->graph, impl_->report, {options.int8_convolutions});
  if (bf16) infer::request_bf16(impl_->graph, impl_->report);
  for (const auto& v : impl_->loaded.inputs) impl_->inputs.push_back(ModelValue{v.name, v.dtype, v.shape});
  for (const auto& v : impl_->loaded.outputs) impl_->outputs.push_back(ModelValue{v.name, v.dtype, v.shape});
}

InferenceSession::~InferenceSession() = default;
InferenceSession::InferenceSession(InferenceSession&&) noexcept = default;
InferenceSession& InferenceSession::operator=(InferenceSession&&) noexcept = default;

const std::vector<ModelValue>& InferenceSession::inputs() const { return impl_->inputs; }
const std::vector<ModelValue>& InferenceSession::outputs() const { return impl_->outputs; }

const std::map<std::string, std::string>& InferenceSession::metadata() const {
  return impl_->loaded.metadata;
}

std::vector<Tensor> InferenceSession::run(const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const ThreadScope scope(impl_->threads);
  impl_->check_inputs(inputs);
  std::vector<Tensor> contiguous;
  for (const auto& t : inputs) contiguous.push_back(t.is_contiguous() ? t : t.contiguous());
  infer::Plan& plan = impl_->plan_for_inputs(contiguous);
  std::vector<Tensor> results;
  if (!plan.has_bounded_outputs()) {
    for (const auto& d : plan.output_descs()) results.push_back(Tensor::empty(d.shape, d.dtype));
    impl_->execute(plan, contiguous, results);
    return results;
  }
  // Data-dependent output sizes (a detector's boxes): allocated once the run has told them.
  impl_->in_views.resize(contiguous.size());
  for (std::size_t i = 0; i < contiguous.size(); ++i)
    impl_->in_views[i] =
        infer::TensorView{contiguous[i].dtype(), &contiguous[i].shape(), contiguous[i].raw_data()};
  plan.run(impl_->in_views, {});
  for (std::size_t o = 0; o < plan.output_descs().size(); ++o) {
    results.push_back(Tensor::empty(plan.output_shape(o), plan.output_descs()[o].dtype));
    plan.copy_output(o, results.back().raw_data());
  }
  return results;
}

void InferenceSession::run_into(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const ThreadScope scope(impl_->threads);
  impl_->check_inputs(inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].is_contiguous())
      throw Error("run_into: input '" + impl_->inputs[i].name + "' must be contiguous");
  impl_->execute(impl_->plan_for_inputs(inputs), inputs, outputs);
}

ModelInfo InferenceSession::info(const std::vector<Shape>& input_shapes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const ThreadScope scope(impl_->threads);  // a plan may split its work by the thread count
  const infer::Plan& plan = impl_->plan_for(input_shapes);
  ModelInfo info;
  info.producer = impl_->loaded.producer;
  info.opset = impl_->loaded.opset;
  info.inputs = impl_->inputs;
  info.outputs = impl_->outputs;
  // Every node of the file, those of If branches included.
  const std::function<void(const infer::Graph&)> count = [&](const infer::Graph& g) {
    for (const auto& n : g.nodes) {
      ++info.ops_loaded[n.op];
      for (const auto& [_, a] : n.attributes)
        if (a.kind == infer::Attribute::Kind::graph) count(*a.g);
    }
  };
  count(impl_->loaded);
  for (const auto& [name, t] : impl_->loaded.constants)
    if (t->dtype == DType::f32 || t->dtype == DType::bf16 || t->dtype == DType::i8 || t->dtype == DType::u8)
      info.parameters += t->numel();  // weights, float or quantised (not shape arguments)
  info.ops_planned = plan.stats().ops;
  info.implementations = plan.stats().implementations;
  info.int8_execution = infer::describe_int8_execution(info.ops_planned);
  info.flops = plan.stats().flops;
  info.arena_bytes = plan.stats().arena_bytes;
  info.unplanned_bytes = plan.stats().unplanned_bytes;
  if (!input_shapes.empty()) info.planned_input_shape = input_shapes[0];
  info.rewrites = impl_->report.rewrites;
  info.rewrite_counts = impl_->report.counts;
  for (const auto& line : impl_->plan_reports[input_shapes].rewrites) info.rewrites.push_back(line);
  for (const auto& [kind, count] : impl_->plan_reports[input_shapes].counts)
    info.rewrite_counts[kind] += count;
  return info;
}

std::vector<OpProfile> InferenceSession::profile() const {
  std::map<std::string, OpProfile> by_op;
  for (const auto& [key, plan] : impl_->plans)
    for (const auto& step : plan->profile()) {
      OpProfile& p = by_op[step.op];
      p.op = step.op;
      p.calls += step.calls;
      p.alone_calls += step.alone_calls;
      p.seconds += step.seconds;
      p.flops += step.flops * static_cast<double>(step.calls);
    }
  std::vector<OpProfile> out;
  for (auto& [op, p] : by_op) out.push_back(p);
  return out;
}

}  // namespace cpudl
