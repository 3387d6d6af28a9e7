// Optimisers with PyTorch 1.13's exact update rules, each one fused pass over a parameter's
// memory (src/kernels/optim/), learning-rate schedules and gradient clipping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpudl/nn.h"
#include "cpudl/tensor.h"

namespace cpudl::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, float lr);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient; parameters without one are skipped.
  virtual void step() = 0;
  void zero_grad();
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }
  std::int64_t steps() const { return steps_; }
  // Everything the next step depends on (buffers, moments, step counts), by name, for
  // checkpoints. load_state_dict checks every name and shape before changing anything.
  virtual nn::NamedTensors state_dict() const = 0;
  virtual void load_state_dict(const nn::NamedTensors& state) = 0;

 protected:
  std::vector<Tensor> params_;
  float lr_;
  std::int64_t steps_ = 0;
};

struct SgdOptions {
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Tensor> params, const SgdOptions& options);
  void step() override;
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const nn::NamedTensors& state) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;
  std::vector<bool> started_;
};

struct AdamOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled_weight_decay = false;  // AdamW
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  void step() override;
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const nn::NamedTensors& state) override;

 private:
  AdamOptions options_;
  std::vector<Tensor> m_, v_;
  std::vector<std::int64_t> param_steps_;
};

// AdamW: Adam with decoupled weight decay (PyTorch's default weight_decay 0.01).
inline AdamOptions adamw_options(float lr = 1e-3f, float weight_decay = 0.01f) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.decoupled_weight_decay = true;
  return o;
}

// Learning-rate schedules, stepped once per epoch (or per step for warm-up), as torch.optim.lr_scheduler.
class LrScheduler {
 public:
  explicit LrScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}
  virtual ~LrScheduler() = default;
  void step() {
    ++epoch_;
    optimizer_.set_lr(lr_at(epoch_));
  }
  virtual float lr_at(std::int64_t epoch) const = 0;

 protected:
  Optimizer& optimizer_;
  float base_lr_;
  std::int64_t epoch_ = 0;
};

class StepLr : public LrScheduler {
 public:
  StepLr(Optimizer& o, std::int64_t step_size, float gamma = 0.1f)
      : LrScheduler(o), step_size_(step_size), gamma_(gamma) {}
  float lr_at(std::int64_t epoch) const override;

 private:
  std::int64_t step_size_;
  float gamma_;
};

class CosineAnnealingLr : public LrScheduler {
 public:
  CosineAnnealingLr(Optimizer& o, std::int64_t t_max, float eta_min = 0.0f)
      : LrScheduler(o), t_max_(t_max), eta_min_(eta_min) {}
  float lr_at(std::int64_t epoch) const override;

 private:
  std::int64_t t_max_;
  float eta_min_;
};

// Linear warm-up from start_factor * lr to lr over `warmup` steps (torch's LinearLR).
class LinearWarmup : public LrScheduler {
 public:
  LinearWarmup(Optimizer& o, std::int64_t warmup, float start_factor = 1.0f / 3.0f);
  float lr_at(std::int64_t step) const override;

 private:
  std::int64_t warmup_;
  float start_factor_;
};

// The learning rate of optimiser step `step` (0-based) of a run, as a pure function of the step, so
// that a resumed run continues the schedule exactly (`cpudl train --lr-schedule`):
//   constant  base_lr
//   step      base_lr * gamma^(epoch / step_size_epochs)             (torch StepLR, per epoch)
//   cosine    base_lr * (1 + cos(pi * t / (total - warmup))) / 2     (torch CosineAnnealingLR per step)
//   onecycle  torch OneCycleLR's learning rate with its defaults (max_lr = base_lr, pct_start 0.3,
//             cosine annealing, div_factor 25, final_div_factor 1e4); momentum is not cycled
// with, for constant, step and cosine, a linear warm-up over the first warmup_steps (the factor
// step / warmup_steps, as Hugging Face's get_*_schedule_with_warmup; t counts from its end).
struct LrSchedule {
  std::string kind = "constant";
  float base_lr = 1e-3f;
  std::int64_t total_steps = 1, steps_per_epoch = 1, warmup_steps = 0;
  std::int64_t step_size_epochs = 1;
  float gamma = 0.1f;
};
float scheduled_lr(const LrSchedule& schedule, std::int64_t step);

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before.
float clip_grad_norm(const std::vector<Tensor>& params, float max_norm);

}  // namespace cpudl::optim
