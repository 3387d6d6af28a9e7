// Activation checkpointing (autograd.h): a segment run without a graph in forward and again, with
// one, inside its output's backward. Written here rather than borrowed: it is a few lines on top of
// this engine's nodes, and it must know the engine's grad mode and the batch-norm side effects.
#include "cpudl/autograd.h"
#include "cpudl/error.h"

namespace cpudl {

namespace {
thread_local bool g_recomputing = false;

class RecomputingScope {
 public:
  RecomputingScope() : previous_(g_recomputing) { g_recomputing = true; }
  ~RecomputingScope() { g_recomputing = previous_; }
  RecomputingScope(const RecomputingScope&) = delete;
  RecomputingScope& operator=(const RecomputingScope&) = delete;

 private:
  bool previous_;
};
}  // namespace

bool autograd::recomputing() { return g_recomputing; }

Tensor autograd::checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  if (!grad_mode_enabled()) return fn(input);  // nothing to save memory from
  const std::uint64_t rng = default_generator().state();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(input);
  }
  // The segment's parameters need gradients even when its input does not (a network's first
  // segment, on the data): the node is recorded on the input alone when it requires grad, and
  // otherwise on the detached input marked as requiring one, whose gradient nobody reads.
  Tensor edge = input;
  if (!input.requires_grad()) edge = input.detach().set_requires_grad(true);
  record(out, "Checkpoint", {edge}, [fn, input, rng](const Tensor& grad_output) -> std::vector<Tensor> {
    Tensor x = input.detach();
    if (input.requires_grad()) x.set_requires_grad(true);
    Tensor again;
    Generator& gen = default_generator();
    const std::uint64_t now = gen.state();
    {
      GradModeGuard grad(true);
      RecomputingScope recomputing;
      gen.seed(rng);  // the forward's random state: the same dropout masks
      again = fn(x);
      gen.seed(now);
    }
    if (!again.requires_grad())
      throw Error("checkpoint: the recomputed segment has no parameter or input that requires grad");
    again.backward(grad_output);
    return {input.requires_grad() ? x.grad() : Tensor()};
  });
  return out;
}

}  // namespace cpudl
