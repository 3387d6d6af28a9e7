// The backward pass: dependency-counted topological order from the root, gradients summed per
// node, leaves' gradients accumulated into .grad, each node's saved tensors freed after it runs.
#include <atomic>
#include <unordered_map>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "runtime/op_profile.h"
#include "tensor/layout.h"

namespace cpudl {

namespace {
thread_local bool g_grad_enabled = true;
thread_local autograd::GradientReadyHook g_gradient_ready;
std::atomic<std::int64_t> g_live_nodes{0};

// A node whose backward is a function of the output gradient (most ops).
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, autograd::BackwardFn fn) : Node(name), fn_(std::move(fn)) { ++g_live_nodes; }
  ~FunctionNode() override { --g_live_nodes; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    if (!fn_)
      throw Error(
          "backward through " + name() +
          " a second time: its saved tensors were freed (pass retain_graph=true to the first backward)");
    profiling::Scope profile(name().c_str(), "backward");
    return fn_(grad);
  }
  void release() override { fn_ = nullptr; }

 private:
  autograd::BackwardFn fn_;
};

// Whether nothing but `t` references its tensor and storage (no other tensor, no view of the
// storage, no graph): its buffer may then be taken over or written. A gradient add hands to both
// its inputs is shared and fails this.
bool owns_its_buffer(const Tensor& t) {
  const std::shared_ptr<TensorImpl> impl = t.impl();  // t's reference and this one
  return impl.use_count() == 2 && impl->storage.use_count() == 1 && !impl->grad_fn && !impl->requires_grad;
}

// Sums gradients into a leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {
    ++g_live_nodes;
  }
  ~AccumulateGrad() override { --g_live_nodes; }
  std::vector<Tensor> apply(const Tensor& grad) override {
    if (auto leaf = leaf_.lock()) {
      if (leaf->shape != grad.shape())
        throw Error("gradient of shape " + shape_text(grad.shape()) + " for a tensor of shape " +
                    shape_text(leaf->shape));
      if (!leaf->grad) {
        // The leaf needs its own contiguous buffer (later steps add into it). A gradient that
        // nothing else references (no other tensor, no view of its storage) already is one and
        // is adopted, as PyTorch's AccumulateGrad steals it: cloning every parameter's gradient
        // after each zero_grad was 5% of a ResNet-18 training step (47 MB copied).
        const bool adopt = owns_its_buffer(grad) && grad.is_contiguous() && grad.dtype() == leaf->dtype;
        leaf->grad = adopt ? grad.impl() : grad.detach().clone().impl();
      } else {
        add_(Tensor(leaf->grad), grad);  // in place: optimisers may hold this buffer
      }
      if (g_gradient_ready) g_gradient_ready(Tensor(leaf));
    }
    return {};
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

}  // namespace

bool autograd::gradient_is_disposable(const Tensor& grad_output) {
  return grad_output.defined() && owns_its_buffer(grad_output);
}

namespace {

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  const auto& impl = t.impl();
  if (impl->grad_fn) return impl->grad_fn;
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl);
    impl->grad_accumulator = acc;
  }
  return acc;
}

}  // namespace

void autograd::set_gradient_ready_hook(GradientReadyHook hook) { g_gradient_ready = std::move(hook); }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }
bool grad_mode_enabled() { return g_grad_enabled; }
GradModeGuard::GradModeGuard(bool enabled) : previous_(g_grad_enabled) { g_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { g_grad_enabled = previous_; }

namespace autograd {

void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!g_grad_enabled) return;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next.push_back(gradient_edge(t));
  out.impl()->grad_fn = node;
  out.impl()->requires_grad = true;
}

std::int64_t live_nodes() { return g_live_nodes.load(); }

}  // namespace autograd

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  if (!requires_grad())
    throw Error("backward() on a tensor that does not require grad (shape " + shape_text(shape()) +
                "): no input of the computation has requires_grad set");
  Tensor seed = gradient;
  if (!seed.defined()) {
    if (numel() != 1)
      throw Error("backward() on a tensor of shape " + shape_text(shape()) +
                  " needs an explicit gradient (implicit only for one-element outputs)");
    seed = Tensor::ones(shape());
  } else if (seed.shape() != shape()) {
    throw Error("backward(): gradient of shape " + shape_text(seed.shape()) + " for a tensor of shape " +
                shape_text(shape()));
  }
  NoGradGuard no_grad;             // the backward pass itself is not recorded (no double backward)
  profiling::BackwardPhase phase;  // ops the engine runs itself (gradient sums) count as backward
  const std::shared_ptr<Node> root = gradient_edge(*this);

  // Count, for every node reachable from the root, how many edges lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack = {root.get()};
  dependencies[root.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& next : n->next) {
      if (!next) continue;
      if (dependencies.count(next.get()) == 0) stack.push_back(next.get());
      ++dependencies[next.get()];
    }
  }

  std::unordered_map<Node*, Tensor> pending;  // summed incoming gradients
  pending[root.get()] = seed;
  std::vector<std::shared_ptr<Node>> ready = {root};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    // A node no gradient reached (an input whose backward returned none) still releases its
    // edges, so nodes that also hang below other paths become ready.
    std::vector<Tensor> input_grads;
    if (auto it = pending.find(node.get()); it != pending.end()) {
      const Tensor grad = std::move(it->second);
      pending.erase(it);
      input_grads = node->apply(grad);
      if (!retain_graph) node->release();
    }
    for (std::size_t i = 0; i < node->next.size(); ++i) {
      const auto& next = node->next[i];
      if (!next) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        Tensor& slot = pending[next.get()];
        // A second contribution goes into the pending sum in place when the sum owns its buffer:
        // back into the lines just read, not into a third buffer fetched for ownership (ResNet-18's
        // residual inputs, batch 16 at 224x224: the engine's sums 11.7-12.6 -> 7.5-8.3 ms a step on
        // one thread, 5.7-5.9 -> 3.8-4.1 on two).
        if (!slot.defined())
          slot = input_grads[i];
        else if (owns_its_buffer(slot) && slot.dtype() == DType::f32 &&
                 slot.shape() == input_grads[i].shape() && same_dense_layout(slot, input_grads[i]))
          add_(slot, input_grads[i]);
        else
          slot = add(slot, input_grads[i]);
      }
      if (--dependencies[next.get()] == 0) ready.push_back(next);
    }
  }
}

}  // namespace cpudl
