// SGD and Adam/AdamW on the fused kernels, split across the pool per parameter.
#include <cmath>
#include <cstring>
#include <map>

#include "cpudl/error.h"
#include "cpudl/optim.h"
#include "kernels/dispatch.h"
#include "runtime/op_profile.h"
#include "runtime/parallel.h"

namespace cpudl::optim {

namespace {
constexpr std::size_t kGrain = std::size_t{1} << 15;

Tensor gradient_of(const Tensor& p, std::size_t index) {
  Tensor g = p.grad();
  if (!g.defined()) return g;
  if (g.shape() != p.shape())
    throw Error("optimizer: gradient of parameter " + std::to_string(index) + " has shape " +
                shape_text(g.shape()) + ", the parameter " + shape_text(p.shape()));
  return g.contiguous();
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, float lr) : params_(std::move(params)), lr_(lr) {
  if (!(lr >= 0.0f)) throw Error("optimizer: learning rate must be >= 0, got " + std::to_string(lr));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined() || params_[i].dtype() != DType::f32 || !params_[i].is_contiguous())
      throw Error("optimizer: parameter " + std::to_string(i) + " must be a contiguous f32 tensor");
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

Sgd::Sgd(std::vector<Tensor> params, const SgdOptions& o) : Optimizer(std::move(params), o.lr), options_(o) {
  if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f))
    throw Error("SGD: Nesterov momentum requires a momentum and zero dampening");
  for (const Tensor& p : params_)
    momentum_.push_back(o.momentum != 0.0f ? Tensor::zeros(p.shape()) : Tensor());
  started_.assign(params_.size(), false);
}

void Sgd::step() {
  profiling::Scope profile("sgd_step", "optimizer");
  const auto fn = kernels::kernel_table().f32_sgd_step.fn;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = gradient_of(params_[i], i);
    if (!g.defined()) continue;
    const kernels::SgdParams p{
        lr_, options_.momentum, options_.dampening, options_.weight_decay, options_.nesterov, !started_[i]};
    float* w = params_[i].data();
    const float* gd = g.data();
    float* buf = momentum_[i].defined() ? momentum_[i].data() : nullptr;
    parallel_for(static_cast<std::size_t>(params_[i].numel()), kGrain,
                 [&](std::size_t b, std::size_t e) { fn(w + b, gd + b, buf ? buf + b : nullptr, e - b, p); });
    started_[i] = true;
    params_[i].bump_version();
  }
  ++steps_;
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o)
    : Optimizer(std::move(params), o.lr), options_(o) {
  if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1)
    throw Error("Adam: betas must be in [0, 1)");
  for (const Tensor& p : params_) {
    m_.push_back(Tensor::zeros(p.shape()));
    v_.push_back(Tensor::zeros(p.shape()));
  }
  param_steps_.assign(params_.size(), 0);
}

namespace {
Tensor i64_scalar(std::int64_t v) { return Tensor::from_buffer(&v, {}, DType::i64); }
std::int64_t i64_value(const Tensor& t) { return t.data_as<std::int64_t>()[0]; }

// Checks that `state` holds exactly the names and shapes of `expected`, then copies it over.
void load_named(const char* who, const nn::NamedTensors& expected, const nn::NamedTensors& state) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  if (given.size() != expected.size())
    throw Error(std::string(who) + " state: " + std::to_string(given.size()) + " entries, expected " +
                std::to_string(expected.size()) + " (a checkpoint of another model or optimiser?)");
  for (const auto& [name, t] : expected) {
    const auto it = given.find(name);
    if (it == given.end()) throw Error(std::string(who) + " state: missing " + name);
    if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
      throw Error(std::string(who) + " state: " + name + " is " + shape_text(it->second.shape()) +
                  ", expected " + shape_text(t.shape()));
  }
  for (const auto& [name, t] : expected)
    std::memcpy(t.raw_data(), given.at(name).contiguous().raw_data(),
                static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
}
}  // namespace

nn::NamedTensors Sgd::state_dict() const {
  nn::NamedTensors s = {{"steps", i64_scalar(steps_)}};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back("started." + std::to_string(i), i64_scalar(started_[i] ? 1 : 0));
    if (momentum_[i].defined()) s.emplace_back("momentum." + std::to_string(i), momentum_[i]);
  }
  return s;
}

void Sgd::load_state_dict(const nn::NamedTensors& state) {
  const nn::NamedTensors expected = state_dict();
  load_named("SGD", expected, state);
  steps_ = i64_value(expected[0].second);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (const auto& [name, t] : expected)
      if (name == "started." + std::to_string(i)) started_[i] = i64_value(t) != 0;
  }
}

nn::NamedTensors Adam::state_dict() const {
  nn::NamedTensors s = {{"steps", i64_scalar(steps_)}};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back("step." + std::to_string(i), i64_scalar(param_steps_[i]));
    s.emplace_back("m." + std::to_string(i), m_[i]);
    s.emplace_back("v." + std::to_string(i), v_[i]);
  }
  return s;
}

void Adam::load_state_dict(const nn::NamedTensors& state) {
  const nn::NamedTensors expected = state_dict();
  load_named("Adam", expected, state);
  steps_ = i64_value(expected[0].second);
  for (std::size_t i = 0; i < params_.size(); ++i) param_steps_[i] = i64_value(expected[1 + 3 * i].second);
}

void Adam::step() {
  profiling::Scope profile("adam_step", "optimizer");
  const auto fn = kernels::kernel_table().f32_adam_step.fn;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = gradient_of(params_[i], i);
    if (!g.defined()) continue;
    const kernels::AdamParams p{lr_,
                                options_.beta1,
                                options_.beta2,
                                options_.eps,
                                options_.weight_decay,
                                options_.decoupled_weight_decay,
                                ++param_steps_[i]};
    float* w = params_[i].data();
    const float* gd = g.data();
    float *m = m_[i].data(), *v = v_[i].data();
    parallel_for(static_cast<std::size_t>(params_[i].numel()), kGrain,
                 [&](std::size_t b, std::size_t e) { fn(w + b, gd + b, m + b, v + b, e - b, p); });
    params_[i].bump_version();
  }
  ++steps_;
}

float StepLr::lr_at(std::int64_t epoch) const {
  return base_lr_ * std::pow(gamma_, static_cast<float>(epoch / std::max<std::int64_t>(step_size_, 1)));
}

float CosineAnnealingLr::lr_at(std::int64_t epoch) const {
  const double t =
      static_cast<double>(std::min(epoch, t_max_)) / static_cast<double>(std::max<std::int64_t>(t_max_, 1));
  return static_cast<float>(eta_min_ + (base_lr_ - eta_min_) * (1 + std::cos(M_PI * t)) / 2);
}

LinearWarmup::LinearWarmup(Optimizer& o, std::int64_t warmup, float start_factor)
    : LrScheduler(o), warmup_(warmup), start_factor_(start_factor) {
  o.set_lr(lr_at(0));
}

float LinearWarmup::lr_at(std::int64_t step) const {
  if (step >= warmup_) return base_lr_;
  const float f = start_factor_ + (1.0f - start_factor_) * static_cast<float>(step) /
                                      static_cast<float>(std::max<std::int64_t>(warmup_, 1));
  return base_lr_ * f;
}

float scheduled_lr(const LrSchedule& s, std::int64_t step) {
  const double base = s.base_lr;
  if (s.kind == "onecycle") {  // torch.optim.lr_scheduler.OneCycleLR, two phases
    const double initial = base / 25.0, minimum = initial / 1e4;
    const double up_end = 0.3 * static_cast<double>(s.total_steps) - 1,
                 down_end = static_cast<double>(s.total_steps - 1);
    const auto anneal = [](double from, double to, double pct) {
      return to + (from - to) / 2 * (std::cos(M_PI * pct) + 1);
    };
    const auto k = static_cast<double>(step);
    if (k <= up_end) return static_cast<float>(anneal(initial, base, k / up_end));
    return static_cast<float>(anneal(base, minimum, (k - up_end) / (down_end - up_end)));
  }
  if (step < s.warmup_steps)
    return static_cast<float>(base * static_cast<double>(step) / static_cast<double>(s.warmup_steps));
  if (s.kind == "step") {
    const std::int64_t epoch = step / std::max<std::int64_t>(s.steps_per_epoch, 1);
    return static_cast<float>(
        base * std::pow(s.gamma, static_cast<double>(epoch / std::max<std::int64_t>(s.step_size_epochs, 1))));
  }
  if (s.kind == "cosine") {
    const double t = static_cast<double>(step - s.warmup_steps),
                 span = static_cast<double>(std::max<std::int64_t>(s.total_steps - s.warmup_steps, 1));
    return static_cast<float>(base * (1 + std::cos(M_PI * std::min(t, span) / span)) / 2);
  }
  return s.base_lr;
}

float clip_grad_norm(const std::vector<Tensor>& params, float max_norm) {
  double total = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor gc = g.contiguous();
    for (std::int64_t i = 0; i < gc.numel(); ++i) total += static_cast<double>(gc.data()[i]) * gc.data()[i];
  }
  const auto norm = static_cast<float>(std::sqrt(total));
  const float scale = max_norm / (norm + 1e-6f);  // PyTorch's clip_coef
  if (scale < 1.0f)
    for (const Tensor& p : params) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      float* d = g.data();
      for (std::int64_t i = 0; i < g.numel(); ++i) d[i] *= scale;
      g.bump_version();
    }
  return norm;
}

}  // namespace cpudl::optim
