// Optimisers and schedules: SGD, Adam and AdamW steps against their update rules, learning-rate
// schedules and gradient clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/nn.h"
#include "cpudl/optim.h"

namespace cpudl {
namespace {

TEST(Optim, StepsFollowTheUpdateRules) {
  Tensor w = Tensor::from_vector({1.0f, -2.0f}, {2});
  w.set_requires_grad();
  optim::Sgd sgd({w}, {0.1f, 0.9f, 0.0f, 0.0f, false});
  for (int i = 0; i < 2; ++i) {
    sum(mul(w, w)).backward();  // grad = 2w
    sgd.step();
    sgd.zero_grad();
  }
  // step 1: buf = 2w0 = [2, -4]; w1 = w0 - 0.1 buf = [0.8, -1.6]
  // step 2: buf = 0.9 [2, -4] + 2 w1 = [3.4, -6.8]; w2 = w1 - 0.1 buf = [0.46, -0.92]
  EXPECT_NEAR(w.at({0}), 0.46f, 1e-6);
  EXPECT_NEAR(w.at({1}), -0.92f, 1e-6);

  Tensor v = Tensor::from_vector({0.5f}, {1});
  v.set_requires_grad();
  optim::Adam adam({v}, optim::AdamOptions{});
  sum(mul(v, 3.0f)).backward();
  adam.step();
  // First Adam step moves by lr * g / (|g| + eps') = lr in the gradient's direction.
  EXPECT_NEAR(v.at({0}), 0.5f - 1e-3f, 1e-7);
}

TEST(Optim, SchedulesAndClipping) {
  Tensor w = Tensor::zeros({1});
  w.set_requires_grad();
  optim::Sgd sgd({w}, {1.0f});
  optim::StepLr step(sgd, 2, 0.5f);
  step.step();
  EXPECT_FLOAT_EQ(sgd.lr(), 1.0f);
  step.step();
  EXPECT_FLOAT_EQ(sgd.lr(), 0.5f);
  optim::Sgd sgd2({w}, {2.0f});
  optim::CosineAnnealingLr cos(sgd2, 4);
  cos.step();
  cos.step();
  EXPECT_NEAR(sgd2.lr(), 1.0f, 1e-6);  // half way: (1 + cos(pi/2)) / 2 * 2
  optim::Sgd sgd3({w}, {1.0f});
  optim::LinearWarmup warm(sgd3, 4, 0.25f);
  EXPECT_FLOAT_EQ(sgd3.lr(), 0.25f);
  for (int i = 0; i < 4; ++i) warm.step();
  EXPECT_FLOAT_EQ(sgd3.lr(), 1.0f);

  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({1});
  a.set_grad(Tensor::from_vector({3, 0}, {2}));
  b.set_grad(Tensor::from_vector({4}, {1}));
  EXPECT_NEAR(optim::clip_grad_norm({a, b}, 1.0f), 5.0f, 1e-6);
  EXPECT_NEAR(a.grad().at({0}), 0.6f, 1e-5);
  EXPECT_NEAR(b.grad().at({0}), 0.8f, 1e-5);
}

}  // namespace
}  // namespace cpudl
