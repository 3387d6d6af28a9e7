// InferenceSession: the loaded graph, optimised once, and a plan per input shape.
#include <cstdlib>
#include <mutex>

#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "infer/onnx_loader.h"
#include "infer/optimizer.h"
#include "infer/plan.h"

namespace cpudl {

struct InferenceSession::Impl {
  std::filesystem::path path;
  infer::Graph loaded, graph;
  infer::OptimizerReport report;
  std::vector<ModelValue> inputs, outputs;
  std::map<std::vector<Shape>, std::unique_ptr<infer::Plan>> plans;
  std::map<std::vector<Shape>, infer::OptimizerReport> plan_reports;
  bool optimize = true, profiling = false;
  std::mutex mutex;

  infer::Plan& plan_for(const std::vector<Shape>& shapes) {
    auto it = plans.find(shapes);
    if (it != plans.end()) return *it->second;
    infer::OptimizerReport r;
    it = plans.emplace(shapes, std::make_unique<infer::Plan>(graph, shapes, r, optimize)).first;
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
  const char* env = std::getenv("CPUDL_PROFILE");
  impl_->profiling = options.profile || (env && std::string(env) == "1");
  if (options.optimize) infer::optimize_graph(impl_->graph, impl_->report);
  for (const auto& v : impl_->loaded.inputs) impl_->inputs.push_back(ModelValue{v.name, v.dtype, v.shape});
  for (const auto& v : impl_->loaded.outputs) impl_->outputs.push_back(ModelValue{v.name, v.dtype, v.shape});
}

InferenceSession::~InferenceSession() = default;
InferenceSession::InferenceSession(InferenceSession&&) noexcept = default;
InferenceSession& InferenceSession::operator=(InferenceSession&&) noexcept = default;

const std::vector<ModelValue>& InferenceSession::inputs() const { return impl_->inputs; }
const std::vector<ModelValue>& InferenceSession::outputs() const { return impl_->outputs; }

std::vector<Tensor> InferenceSession::run(const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const auto& declared = impl_->inputs;
  if (inputs.size() != declared.size())
    throw Error(impl_->path.string() + ": the model takes " + std::to_string(declared.size()) + " input(s), " +
                std::to_string(inputs.size()) + " given");
  std::vector<Shape> shapes;
  std::vector<Tensor> contiguous;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) throw Error("input '" + declared[i].name + "' is undefined");
    if (inputs[i].dtype() != declared[i].dtype)
      throw Error("input '" + declared[i].name + "' is " + std::string(dtype_name(inputs[i].dtype())) + ", the model expects " +
                  std::string(dtype_name(declared[i].dtype)));
    shapes.push_back(inputs[i].shape());
    contiguous.push_back(inputs[i].is_contiguous() ? inputs[i] : inputs[i].contiguous());
  }
  infer::Plan& plan = impl_->plan_for(shapes);
  std::vector<infer::TensorView> in, out;
  for (std::size_t i = 0; i < contiguous.size(); ++i)
    in.push_back(infer::TensorView{contiguous[i].dtype(), &shapes[i], contiguous[i].raw_data()});
  std::vector<Tensor> results;
  for (const auto& d : plan.output_descs()) results.push_back(Tensor::empty(d.shape, d.dtype));
  for (std::size_t o = 0; o < results.size(); ++o)
    out.push_back(infer::TensorView{results[o].dtype(), &plan.output_descs()[o].shape, results[o].raw_data()});
  plan.run(in, out);
  return results;
}

ModelInfo InferenceSession::info(const std::vector<Shape>& input_shapes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const infer::Plan& plan = impl_->plan_for(input_shapes);
  ModelInfo info;
  info.producer = impl_->loaded.producer;
  info.opset = impl_->loaded.opset;
  info.inputs = impl_->inputs;
  info.outputs = impl_->outputs;
  for (const auto& n : impl_->loaded.nodes) ++info.ops_loaded[n.op];
  for (const auto& [name, t] : impl_->loaded.constants)
    if (t->dtype == DType::f32) info.parameters += t->numel();
  info.ops_planned = plan.stats().ops;
  info.flops = plan.stats().flops;
  info.arena_bytes = plan.stats().arena_bytes;
  info.unplanned_bytes = plan.stats().unplanned_bytes;
  if (!input_shapes.empty()) info.planned_input_shape = input_shapes[0];
  info.rewrites = impl_->report.rewrites;
  info.rewrite_counts = impl_->report.counts;
  for (const auto& line : impl_->plan_reports[input_shapes].rewrites) info.rewrites.push_back(line);
  for (const auto& [kind, count] : impl_->plan_reports[input_shapes].counts) info.rewrite_counts[kind] += count;
  return info;
}

std::vector<OpProfile> InferenceSession::profile() const {
  std::map<std::string, OpProfile> by_op;
  for (const auto& [shapes, plan] : impl_->plans)
    for (const auto& step : plan->profile()) {
      OpProfile& p = by_op[step.op];
      p.op = step.op;
      p.calls += step.calls;
      p.seconds += step.seconds;
      p.flops += step.flops * static_cast<double>(step.calls);
    }
  std::vector<OpProfile> out;
  for (auto& [op, p] : by_op) out.push_back(p);
  return out;
}

}  // namespace cpudl
