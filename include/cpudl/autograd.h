// Define-by-run reverse-mode autodiff, as PyTorch's: each differentiable op records a Node that
// maps the gradient of its output to gradients of its inputs; backward() walks them in
// dependency order and frees the graph as it goes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpudl/tensor.h"

namespace cpudl {

class Node {
 public:
  explicit Node(std::string name) : name_(std::move(name)) {}
  virtual ~Node() = default;
  // Gradients with respect to each input (undefined where an input needs none).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Drops saved tensors once the node has run (the graph is freed after backward).
  virtual void release() {}
  const std::string& name() const { return name_; }
  // One entry per input: the node its gradient flows to (null when it needs none).
  std::vector<std::shared_ptr<Node>> next;

 private:
  std::string name_;
};

// Disables graph recording in its scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_mode_enabled();
// Sets grad mode for its scope (torch.set_grad_enabled): the recomputation inside a checkpoint's
// backward records its graph although the backward pass itself runs without one.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

namespace autograd {
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
// Records `out` as the result of op `name` on `inputs` when grad mode is on and any input
// requires grad; `backward` maps d(loss)/d(out) to d(loss)/d(input) for each input.
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward);
// Live autograd nodes in the process (a leak check for tests).
std::int64_t live_nodes();
// Called on the thread running backward() when a leaf's gradient for that pass is complete (its
// accumulation ran, once per pass), with the leaf: data-parallel training starts summing that
// gradient over the ranks there, while the rest of the backward pass runs. One hook per thread;
// an empty function removes it.
using GradientReadyHook = std::function<void(const Tensor& leaf)>;
void set_gradient_ready_hook(GradientReadyHook hook);

// Whether a backward function may write its result into the buffer of the gradient it received:
// nothing but the engine's own reference holds that tensor or its storage (no view, no second
// pending sum, no graph). Batch normalisation's backward then returns its input gradient in place:
// one activation-sized buffer fewer where activation checkpointing peaks.
bool gradient_is_disposable(const Tensor& grad_output);

// Activation checkpointing (torch.utils.checkpoint, the re-entrant form): fn(input) runs without a
// graph, so the activations inside fn are freed as forward goes on and only `input` is kept; the
// output's backward runs fn again with the graph recorded, on the same random state (dropout draws
// the same masks), and backpropagates through it: the parameters fn uses receive their gradients
// there, `input` through the returned node. Memory of a segment's activations traded for a second
// forward of it. fn must use its parameters only inside the segment (their gradient is complete,
// and the gradient-ready hook fires, when the recomputation's backward ends).
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);
// True while a checkpoint recomputes its segment: layers with side effects in training (batch
// normalisation's running statistics) must not apply them a second time.
bool recomputing();
}  // namespace autograd

}  // namespace cpudl
