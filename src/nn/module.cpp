// Module bookkeeping: registration, recursive naming, state dicts, modes.
#include <map>
#include <set>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/nn.h"
#include "tensor/strided.h"

namespace cpudl::nn {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  if (value.defined()) value.set_requires_grad(true);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, value);
  return value;
}

void Module::collect(const std::string& prefix, NamedTensors& out, bool parameters, bool buffers) const {
  // PyTorch's order: a module's own parameters, then its buffers, then each child's.
  if (parameters)
    for (const auto& [name, t] : parameters_)
      if (t.defined()) out.emplace_back(prefix + name, t);
  if (buffers)
    for (const auto& [name, t] : buffers_)
      if (t.defined()) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, parameters, buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out, true, false);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, false, true);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", out, true, true);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::vector<std::string> missing, mismatched;
  std::set<std::string> used;
  for (const auto& [name, target] : state_dict()) {
    const auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    const Tensor& source = it->second;
    if (source.shape() != target.shape() || source.dtype() != target.dtype()) {
      mismatched.push_back(name + " is " + std::string(dtype_name(source.dtype())) +
                           shape_text(source.shape()) + " in the state dict, the model expects " +
                           std::string(dtype_name(target.dtype())) + shape_text(target.shape()));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : state)
    if (!used.count(name)) unexpected.push_back(name);
  std::string problems;
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    problems += (problems.empty() ? "" : "; ") + std::string(what) + ": ";
    for (std::size_t i = 0; i < names.size(); ++i) problems += (i ? ", " : "") + names[i];
  };
  list("shape or dtype mismatch", mismatched);
  if (strict) {
    list("missing", missing);
    list("unexpected", unexpected);
  }
  if (!problems.empty()) throw Error("load_state_dict: " + problems);
  NoGradGuard no_grad;
  for (const auto& [name, target] : state_dict()) {
    const auto it = given.find(name);
    if (it == given.end()) continue;
    copy_strided(it->second.contiguous(), target);
    target.bump_version();
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

Sequential::Sequential(std::vector<ModulePtr> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(ModulePtr module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& m : modules_) h = m->forward(h);
  return h;
}

bool Sequential::checkpoint_activations(bool on) {
  bool any = false;
  for (const auto& m : modules_) any = m->checkpoint_activations(on) || any;
  return any;
}

}  // namespace cpudl::nn
