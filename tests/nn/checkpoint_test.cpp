// Activation checkpointing: a segment run without a graph and recomputed in backward gives the
// gradients plain autograd gives (the reference: the same ops recorded once), applies batch
// normalisation's running statistics once, replays dropout's masks, and reaches the parameters of
// a segment whose input needs no gradient.
#include <gtest/gtest.h>

#include "cpudl/autograd.h"
#include "cpudl/nn.h"
#include "cpudl/ops.h"

namespace cpudl {
namespace {

// Largest |a - b| over two same-shaped tensors.
float max_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  float worst = 0;
  for (std::int64_t i = 0; i < ac.numel(); ++i)
    worst = std::max(worst, std::abs(ac.data()[i] - bc.data()[i]));
  return worst;
}

struct StepResult {
  std::vector<Tensor> grads;
  nn::NamedTensors state;
  Tensor input_grad;
};

// One training step's gradients of `name` (fresh weights from seed 7) on a fixed batch.
StepResult step(const std::string& name, bool checkpointed, bool input_requires_grad) {
  manual_seed(7);
  const auto model = nn::make_model(name, 10, 3, /*cifar_stem=*/true);
  EXPECT_EQ(model->checkpoint_activations(checkpointed), name == "resnet18");
  manual_seed(11);
  Tensor x = Tensor::randn({3, 3, 16, 16});
  if (input_requires_grad) x.set_requires_grad(true);
  const std::int64_t labels[] = {1, 4, 9};
  const Tensor y = Tensor::from_buffer(labels, {3}, DType::i64);
  cross_entropy(model->forward(x), y).backward();
  StepResult r;
  for (const Tensor& p : model->parameters()) r.grads.push_back(p.grad());
  r.state = model->state_dict();
  if (input_requires_grad) r.input_grad = x.grad();
  return r;
}

TEST(Checkpoint, ResNetGradientsAndRunningStatisticsEqualPlainAutograd) {
  for (const bool input_grad : {false, true}) {
    SCOPED_TRACE(input_grad ? "input requires grad" : "input without grad");
    const StepResult plain = step("resnet18", false, input_grad);
    const StepResult ckpt = step("resnet18", true, input_grad);
    ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
    for (std::size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_TRUE(ckpt.grads[i].defined()) << "parameter " << i << " got no gradient";
      // The recomputation runs the same kernels on the same inputs: equal up to the order in which
      // the engine sums a residual input's two gradients.
      EXPECT_LE(max_difference(plain.grads[i], ckpt.grads[i]), 1e-5f) << "parameter " << i;
    }
    // Running statistics (and num_batches_tracked) moved once, not twice.
    for (std::size_t i = 0; i < plain.state.size(); ++i)
      if (plain.state[i].first.find("running") != std::string::npos ||
          plain.state[i].first.find("num_batches") != std::string::npos) {
        const Tensor a = plain.state[i].second, b = ckpt.state[i].second;
        if (a.dtype() == DType::i64)
          EXPECT_EQ(a.data_as<std::int64_t>()[0], b.data_as<std::int64_t>()[0]) << plain.state[i].first;
        else
          EXPECT_EQ(max_difference(a, b), 0.0f) << plain.state[i].first;
      }
    if (input_grad) {
      EXPECT_LE(max_difference(plain.input_grad, ckpt.input_grad), 1e-5f);
    }
  }
}

TEST(Checkpoint, DropoutDrawsTheSameMasksWhenRecomputed) {
  // A segment with dropout: the recomputation must see the forward's random state, or its
  // gradient belongs to another mask; the random state after backward is the one forward left.
  const auto segment = [](const Tensor& w) {
    return [w](const Tensor& x) { return relu(dropout(mul(x, w), 0.5f, /*training=*/true)); };
  };
  manual_seed(3);
  Tensor x = Tensor::randn({64});
  Tensor w1 = Tensor::randn({64}).set_requires_grad(true);
  Tensor w2 = w1.detach().clone().set_requires_grad(true);
  manual_seed(5);
  const Tensor plain = segment(w1)(x);
  sum(plain).backward();
  const std::uint64_t after_plain = default_generator().state();
  manual_seed(5);
  const Tensor ckpt = autograd::checkpoint(segment(w2), x);
  EXPECT_EQ(max_difference(plain, ckpt), 0.0f);
  const std::uint64_t after_forward = default_generator().state();
  sum(ckpt).backward();
  EXPECT_EQ(default_generator().state(), after_forward);
  EXPECT_EQ(after_plain, after_forward);
  EXPECT_EQ(max_difference(w1.grad(), w2.grad()), 0.0f);
}

TEST(Checkpoint, OutsideGradModeItIsThePlainFunction) {
  NoGradGuard no_grad;
  const Tensor w = Tensor::ones({4}).set_requires_grad(true);
  const Tensor out = autograd::checkpoint([&w](const Tensor& x) { return mul(x, w); }, Tensor::ones({4}));
  EXPECT_FALSE(out.requires_grad());
}

}  // namespace
}  // namespace cpudl
