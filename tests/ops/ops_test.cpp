// Autograd: every differentiable op's gradient against central finite differences, gradient
// accumulation, graph freeing, no-grad mode and the errors users hit.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "dense/conv/implicit_gemm_weight_grad.h"
#include "dense/conv/pointwise_conv.h"
#include "dense/conv/tap_gemm_weight_grad.h"
#include "dense/conv/winograd_conv.h"
#include "dense/onednn/dense.h"
#include "dense_reference.h"
#include "kernels/dispatch.h"
#include "tensor/layout.h"

namespace cpudl {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// loss = sum(f(inputs) * w) for a fixed random w, accumulated in double.
double weighted_loss(const Fn& f, const std::vector<Tensor>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  const std::vector<float> out = f(inputs).to_vector(), wv = w.to_vector();
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * wv[i];
  return s;
}

// Compares autograd's gradient of every f32 input with central differences (step eps). A
// wrong derivative (a missing factor, a wrong sign, a transposed operand) is off by O(1).
void check_gradients(const char* name, const Fn& f, std::vector<Tensor> inputs, double eps = 1e-2,
                     double tol = 1e-2) {
  SCOPED_TRACE(name);
  for (Tensor& t : inputs)
    if (t.dtype() == DType::f32) t.set_requires_grad(true);
  const Tensor out = f(inputs);
  Generator gen(99);
  const Tensor w = Tensor::randn(out.shape(), gen);
  sum(mul(out, w)).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != DType::f32) continue;
    const Tensor grad = inputs[i].grad();
    ASSERT_TRUE(grad.defined()) << "no gradient for input " << i;
    ASSERT_EQ(grad.shape(), inputs[i].shape());
    const std::vector<float> g = grad.to_vector();
    float* x = inputs[i].data();
    for (std::int64_t j = 0; j < inputs[i].numel(); ++j) {
      const float saved = x[j];
      // Writes through data() bump the version, as the optimisers do: convolutions keep a
      // reordered copy of their weights per version.
      x[j] = saved + static_cast<float>(eps);
      inputs[i].bump_version();
      const double up = weighted_loss(f, inputs, w);
      x[j] = saved - static_cast<float>(eps);
      inputs[i].bump_version();
      const double down = weighted_loss(f, inputs, w);
      x[j] = saved;
      inputs[i].bump_version();
      const double numeric = (up - down) / (2 * eps);
      ASSERT_NEAR(g[static_cast<std::size_t>(j)], numeric, tol * std::max(1.0, std::fabs(numeric)))
          << "input " << i << " element " << j;
    }
  }
}

Tensor randn(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  Generator g(seed);
  return mul(Tensor::randn(shape, g), scale).detach();
}

// Values bounded away from 0 (kinks of relu/clamp, poles of div/log).
Tensor away_from_zero(const Shape& shape, std::uint64_t seed) {
  Tensor t = randn(shape, seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] += t.data()[i] >= 0 ? 0.3f : -0.3f;
  return t;
}

TEST(Autograd, ArithmeticWithBroadcasting) {
  check_gradients("add", [](auto& v) { return add(v[0], v[1]); }, {randn({2, 3}, 1), randn({3}, 2)});
  check_gradients("sub", [](auto& v) { return sub(v[0], v[1]); }, {randn({2, 1}, 3), randn({2, 4}, 4)});
  check_gradients("mul", [](auto& v) { return mul(v[0], v[1]); }, {randn({3, 1, 2}, 5), randn({4, 1}, 6)});
  check_gradients(
      "div", [](auto& v) { return div(v[0], v[1]); }, {randn({2, 3}, 7), away_from_zero({2, 3}, 8)}, 1e-3);
  check_gradients("scalar ops", [](auto& v) { return add(mul(v[0], 3.0f), 1.0f); }, {randn({5}, 9)});
  check_gradients("neg", [](auto& v) { return -v[0]; }, {randn({4}, 10)});
}

TEST(Autograd, UnaryFunctions) {
  check_gradients(
      "exp", [](auto& v) { return exp(v[0]); }, {randn({6}, 11)}, 1e-3);
  check_gradients(
      "log", [](auto& v) { return log(v[0]); }, {add(exp(randn({6}, 12)), 0.5f).detach()}, 1e-3);
  check_gradients(
      "sqrt", [](auto& v) { return sqrt(v[0]); }, {add(exp(randn({6}, 13)), 0.5f).detach()}, 1e-3);
  check_gradients(
      "pow", [](auto& v) { return pow(v[0], 3.0f); }, {randn({6}, 14)}, 1e-3);
  check_gradients(
      "clamp", [](auto& v) { return clamp(v[0], -0.5f, 0.8f); }, {randn({20}, 15)}, 1e-3);
  check_gradients("relu", [](auto& v) { return relu(v[0]); }, {away_from_zero({20}, 16)});
  check_gradients("leaky_relu", [](auto& v) { return leaky_relu(v[0], 0.1f); }, {away_from_zero({20}, 17)});
  check_gradients(
      "gelu", [](auto& v) { return gelu(v[0]); }, {randn({20}, 18, 2.0f)}, 1e-3);
  check_gradients(
      "sigmoid", [](auto& v) { return sigmoid(v[0]); }, {randn({20}, 19, 3.0f)}, 1e-3);
  check_gradients(
      "tanh", [](auto& v) { return tanh(v[0]); }, {randn({20}, 20, 2.0f)}, 1e-3);
}

// relu(a + b) as one op: finite differences (b a twentieth of a: a + b stays 0.1 from the kink), and the same
// values and gradients as relu(add(a, b)) in NCHW and channels-last inputs; a broadcast input
// takes the two-op path.
TEST(Autograd, AddReluMatchesReluOfAdd) {
  check_gradients("add_relu", [](auto& v) { return add_relu(v[0], v[1]); },
                  {away_from_zero({3, 4}, 27), mul(away_from_zero({3, 4}, 28), 0.05f).detach()});
  for (const bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "channels-last" : "NCHW");
    Tensor a = randn({2, 8, 5, 6}, 29), b = randn({2, 8, 5, 6}, 30);
    if (channels_last) a = channels_last_values(a), b = channels_last_values(b);
    const Tensor g = randn({2, 8, 5, 6}, 31);
    auto run = [&](bool fused) {
      Tensor x = a.detach(), y = b.detach();
      x.set_requires_grad(true);
      y.set_requires_grad(true);
      const Tensor out = fused ? add_relu(x, y) : relu(add(x, y));
      sum(mul(out, g)).backward();
      return std::vector<std::vector<float>>{out.to_vector(), x.grad().to_vector(), y.grad().to_vector()};
    };
    const auto fused = run(true), two_ops = run(false);
    for (std::size_t k = 0; k < fused.size(); ++k) EXPECT_EQ(fused[k], two_ops[k]) << "result " << k;
  }
  const Tensor row = randn({6}, 32), matrix = randn({3, 6}, 33);
  EXPECT_EQ(add_relu(matrix, row).to_vector(), relu(add(matrix, row)).to_vector());
}

// Gradients reaching a node by several paths are summed, later ones added in place into a pending
// sum that nothing else references. add hands one tensor to both its inputs: while that shared
// gradient is u's pending sum and v's, adding u's other gradient into it in place would change
// v's. u = exp(x) and v = 3x each feed s = u + v and one more product; the three terms summed in
// every order (the engine meets them in different orders), NCHW and channels-last, against the
// analytic gradient r * (6 exp(x) + 21).
TEST(Autograd, GradientsReachingANodeTwiceAreSummedWithoutTouchingSharedOnes) {
  for (const bool channels_last : {false, true})
    for (const std::array<int, 3> order :
         {std::array<int, 3>{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}) {
      SCOPED_TRACE(std::string(channels_last ? "channels-last" : "NCHW") + " order " +
                   std::to_string(order[0]) + std::to_string(order[1]) + std::to_string(order[2]));
      Tensor x = randn({2, 3, 4, 5}, 40);
      if (channels_last) x = channels_last_values(x);
      x = x.detach();
      x.set_requires_grad(true);
      const Tensor u = exp(x), v = mul(x, 3.0f);
      const Tensor terms[3] = {add(u, v), mul(u, 5.0f), mul(v, 6.0f)};
      const Tensor total = add(add(terms[order[0]], terms[order[1]]), terms[order[2]]);
      const Tensor r = randn(total.shape(), 41);
      sum(mul(total, r)).backward();
      const std::vector<float> xv = x.to_vector(), rv = r.to_vector(), got = x.grad().to_vector();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const float want = rv[i] * (6.0f * std::exp(xv[i]) + 21.0f);
        ASSERT_NEAR(got[i], want, 1e-5f * (1 + std::fabs(want))) << i;
      }
    }
}

TEST(Autograd, Reductions) {
  check_gradients("sum all", [](auto& v) { return sum(v[0]); }, {randn({3, 4}, 21)});
  check_gradients("sum dims", [](auto& v) { return sum(v[0], {0, 2}); }, {randn({2, 3, 4}, 22)});
  check_gradients("sum keepdim", [](auto& v) { return sum(v[0], {-1}, true); }, {randn({2, 3, 4}, 23)});
  check_gradients("mean", [](auto& v) { return mean(v[0], {1}); }, {randn({3, 5}, 24)});
  check_gradients("max", [](auto& v) { return max(v[0], 1); }, {randn({4, 6}, 25)});
  check_gradients("max dim 0", [](auto& v) { return max(v[0], 0, true); }, {randn({4, 6}, 26)});
}

TEST(Autograd, MatmulAndLinear) {
  check_gradients("matmul 2d", [](auto& v) { return matmul(v[0], v[1]); },
                  {randn({3, 4}, 31), randn({4, 5}, 32)});
  check_gradients("matmul batched", [](auto& v) { return matmul(v[0], v[1]); },
                  {randn({2, 3, 4}, 33), randn({2, 4, 2}, 34)});
  check_gradients("matmul broadcast", [](auto& v) { return matmul(v[0], v[1]); },
                  {randn({2, 3, 4}, 35), randn({4, 2}, 36)});
  check_gradients("matmul vector", [](auto& v) { return matmul(v[0], v[1]); },
                  {randn({3, 4}, 37), randn({4}, 38)});
  check_gradients("linear", [](auto& v) { return linear(v[0], v[1], v[2]); },
                  {randn({5, 4}, 39), randn({3, 4}, 40), randn({3}, 41)});
  check_gradients("linear 3d no bias", [](auto& v) { return linear(v[0], v[1]); },
                  {randn({2, 3, 4}, 42), randn({6, 4}, 43)});
}

TEST(Autograd, SoftmaxAndLosses) {
  check_gradients(
      "softmax", [](auto& v) { return softmax(v[0], -1); }, {randn({3, 5}, 51)}, 1e-3);
  check_gradients(
      "softmax dim 0", [](auto& v) { return softmax(v[0], 0); }, {randn({3, 5}, 52)}, 1e-3);
  check_gradients(
      "log_softmax", [](auto& v) { return log_softmax(v[0], 1); }, {randn({4, 3, 2}, 53)}, 1e-3);
  const std::vector<std::int64_t> labels = {2, 0, 4, 1};
  const Tensor target = Tensor::from_buffer(labels.data(), {4}, DType::i64);
  check_gradients(
      "cross_entropy", [target](auto& v) { return cross_entropy(v[0], target); }, {randn({4, 5}, 54)}, 1e-3);
  check_gradients(
      "cross_entropy smoothing", [target](auto& v) { return cross_entropy(v[0], target, 0.1f); },
      {randn({4, 5}, 55)}, 1e-3);
  check_gradients(
      "nll", [target](auto& v) { return nll_loss(log_softmax(v[0]), target); }, {randn({4, 5}, 56)}, 1e-3);
  check_gradients(
      "mse", [](auto& v) { return mse_loss(v[0], v[1]); }, {randn({3, 4}, 57), randn({3, 4}, 58)}, 1e-3);
  check_gradients(
      "bce_with_logits", [](auto& v) { return binary_cross_entropy_with_logits(v[0], v[1]); },
      {randn({6}, 59, 3.0f), sigmoid(randn({6}, 60)).detach()}, 1e-3);
}

TEST(Autograd, ViewsPassGradientsThrough) {
  check_gradients("permute",
                  [](auto& v) {
                    return mul(v[0].permute({1, 0}), v[1]);
                  },
                  {randn({3, 2}, 61), randn({2, 3}, 62)});
  check_gradients("slice", [](auto& v) { return v[0].slice(1, 1, 4, 2); }, {randn({2, 5}, 63)});
  check_gradients("expand",
                  [](auto& v) {
                    return mul(v[0].expand({3, 4}), v[1]);
                  },
                  {randn({3, 1}, 64), randn({3, 4}, 65)});
  check_gradients("reshape of permuted",
                  [](auto& v) {
                    return v[0].permute({1, 0}).reshape({6});
                  },
                  {randn({2, 3}, 66)});
  check_gradients("flatten unsqueeze", [](auto& v) { return v[0].flatten().unsqueeze(0); },
                  {randn({2, 3}, 67)});
}

// A leaf's first gradient may be adopted rather than copied (engine.cpp), but never when the
// same tensor also reaches another leaf or the caller: add's backward hands one gradient to both
// operands, a view hands out the storage of its input's gradient, and backward(seed) is the
// caller's. Each .grad must stay its own buffer: accumulating a second pass into one must not
// change another, nor the seed.
TEST(Autograd, LeafGradientsNeverShareABuffer) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}), b = Tensor::from_vector({4, 5, 6}, {3});
  Tensor c = Tensor::from_vector({1, 1, 1, 1, 1, 1}, {2, 3});
  for (Tensor* t : {&a, &b, &c}) t->set_requires_grad(true);
  for (int pass = 1; pass <= 2; ++pass) {
    sum(add(add(a, b), c.reshape({6}).slice(0, 0, 3))).backward();
    EXPECT_NE(a.grad().data(), b.grad().data());
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(a.grad().data()[i], static_cast<float>(pass));
      EXPECT_EQ(b.grad().data()[i], static_cast<float>(pass));
      EXPECT_EQ(c.grad().data()[i], static_cast<float>(pass));
      EXPECT_EQ(c.grad().data()[3 + i], 0.0f);
    }
  }
  Tensor leaf = Tensor::from_vector({1, 2}, {2});
  leaf.set_requires_grad(true);
  const Tensor seed = Tensor::from_vector({0.5f, 0.25f}, {2});
  leaf.backward(seed);
  leaf.backward(seed);
  EXPECT_EQ(leaf.grad().data()[0], 1.0f);
  EXPECT_EQ(seed.data()[0], 0.5f);  // the caller's seed was not accumulated into
  EXPECT_NE(leaf.grad().data(), seed.data());
}

// Distinct values 0.1 apart in shuffled order: no near-ties for max pooling's finite differences.
Tensor distinct(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i)
    t.data()[i] = 0.1f * static_cast<float>(i) - 0.05f * static_cast<float>(n);
  Generator g(seed);
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(t.data()[i], t.data()[g.next_u64() % static_cast<std::uint64_t>(i + 1)]);
  return t;
}

TEST(Autograd, ConvolutionAndPooling) {
  check_gradients(
      "conv2d",
      [](auto& v) {
        return conv2d(v[0], v[1], v[2], {1, 1, 1, 1});
      },
      {randn({2, 3, 5, 5}, 81), randn({4, 3, 3, 3}, 82, 0.5f), randn({4}, 83)}, 1e-2, 2e-2);
  check_gradients(
      "conv2d strided dilated grouped",
      [](auto& v) {
        return conv2d(v[0], v[1], Tensor(), {2, 1, 1, 0, 2, 1, 2});
      },
      {randn({1, 4, 7, 6}, 84), randn({6, 2, 3, 2}, 85, 0.5f)}, 1e-2, 2e-2);
  check_gradients(
      "max_pool2d", [](auto& v) { return max_pool2d(v[0], 2); }, {distinct({2, 2, 4, 6}, 86)}, 1e-3);
  check_gradients(
      "max_pool2d padded", [](auto& v) { return max_pool2d(v[0], 3, 2, 1); }, {distinct({1, 2, 5, 5}, 87)},
      1e-3);
  check_gradients("avg_pool2d", [](auto& v) { return avg_pool2d(v[0], 3, 2, 1); }, {randn({1, 2, 5, 5}, 88)});
  check_gradients("avg_pool2d exclude pad", [](auto& v) { return avg_pool2d(v[0], 3, 2, 1, false); },
                  {randn({1, 2, 5, 5}, 89)});
  check_gradients("adaptive_avg_pool2d", [](auto& v) { return adaptive_avg_pool2d(v[0], 3, 2); },
                  {randn({2, 2, 7, 5}, 90)});
}

// Frozen inputs get no gradient and the others the same gradient as when all are trained: conv2d
// and linear skip the passes nobody needs (a first layer's backward-data pass).
TEST(Autograd, OnlyInputsThatNeedGradientsGetThem) {
  const Tensor x = randn({2, 3, 6, 6}, 141), w = randn({4, 3, 3, 3}, 142, 0.5f), b = randn({4}, 143);
  const Tensor fw = randn({5, 4 * 6 * 6}, 144, 0.1f), fb = randn({5}, 145);
  auto grads = [&](bool x_grad, bool w_grad, bool b_grad) {
    std::vector<Tensor> v = {x.clone(), w.clone(), b.clone(), fw.clone(), fb.clone()};
    v[0].set_requires_grad(x_grad);
    v[1].set_requires_grad(w_grad);
    v[2].set_requires_grad(b_grad);
    v[3].set_requires_grad(w_grad);
    v[4].set_requires_grad(b_grad);
    const Tensor y = linear(relu(conv2d(v[0], v[1], v[2], {1, 1, 1, 1})).flatten(1), v[3], v[4]);
    sum(mul(y, y)).backward();
    std::vector<Tensor> g;
    for (const Tensor& t : v) g.push_back(t.grad());
    return g;
  };
  const std::vector<Tensor> all = grads(true, true, true);
  for (int mask = 0; mask < 7; ++mask) {
    const bool xg = mask & 1, wg = mask & 2, bg = mask & 4;
    if (!wg && !bg && !xg) continue;
    SCOPED_TRACE("x " + std::to_string(xg) + " weights " + std::to_string(wg) + " biases " +
                 std::to_string(bg));
    const std::vector<Tensor> some = grads(xg, wg, bg);
    const bool wanted[] = {xg, wg, bg, wg, bg};
    for (std::size_t i = 0; i < some.size(); ++i) {
      ASSERT_EQ(some[i].defined(), wanted[i]) << "input " << i;
      if (!wanted[i]) continue;
      const std::vector<float> got = some[i].to_vector(), want = all[i].to_vector();
      for (std::size_t j = 0; j < got.size(); ++j)
        ASSERT_NEAR(got[j], want[j], 1e-4f * (1 + std::fabs(want[j])));
    }
  }
}

// The oneDNN shape of conv2d(x of shape `x`, weight of shape `w`, options o), for the reference loops.
onednn::ConvShape conv_shape_of(const Shape& x, const Shape& w, const Conv2dOptions& o) {
  onednn::ConvShape s;
  s.batch = x[0], s.in_channels = x[1], s.height = x[2], s.width = x[3];
  s.out_channels = w[0], s.kernel_h = w[2], s.kernel_w = w[3];
  s.stride_h = o.stride_h, s.stride_w = o.stride_w, s.pad_h = o.pad_h, s.pad_w = o.pad_w;
  s.dilation_h = o.dilation_h, s.dilation_w = o.dilation_w;
  return s;
}

// Kernels larger than the map (ResNet-18's 3x3 kernels on its last stage's 1x1 maps at 32x32
// input) run on the cropped live taps: the forward against the direct loop, the gradients (zero
// on the dead taps) against finite differences.
TEST(Autograd, ConvolutionOnMapsSmallerThanItsKernel) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {{{2, 4, 1, 1}, {3, 4, 3, 3}, {1, 1, 1, 1}},
                        {{1, 2, 2, 2}, {3, 2, 5, 5}, {1, 1, 2, 2}},
                        {{1, 2, 3, 1}, {2, 2, 3, 3}, {2, 2, 1, 1}},
                        {{2, 2, 1, 2}, {2, 2, 3, 3}, {1, 1, 1, 1}}};
  std::uint64_t seed = 150;
  for (const Case& c : cases) {
    const Tensor x = randn(c.x, seed++), w = randn(c.w, seed++, 0.5f), b = randn({c.w[0]}, seed++);
    const onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
    const std::vector<float> bias = b.to_vector();
    const std::vector<float> want = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias);
    const std::vector<float> got = conv2d(x, w, b, c.o).to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << "element " << i;
    const Conv2dOptions o = c.o;
    check_gradients(
        "cropped conv2d", [o](auto& v) { return conv2d(v[0], v[1], v[2], o); }, {x, w, b}, 1e-2, 2e-2);
  }
}

// Convolutions whose every window covers the whole map run as one matrix product
// (ops/conv_as_linear.h): ResNet-18's 3x3 kernels on 2x2 maps, a stride-2 one down to 1x1, a
// non-square kernel with unequal padding, a stride-2 5x5 to 2x2, a 1x1 map (cropped to its live tap first),
// and a 1x1 output whose window misses the map's last row and column (which must stay on oneDNN), each with
// bias and ReLU, against the direct loops: values, input, weight and bias gradients.
TEST(Autograd, ConvolutionCoveringTheWholeMapMatchesTheDirectLoop) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{2, 8, 2, 2}, {6, 8, 3, 3}, {1, 1, 1, 1}}, {{3, 4, 2, 2}, {5, 4, 3, 3}, {2, 2, 1, 1}},
      {{2, 3, 2, 3}, {4, 3, 3, 5}, {1, 1, 1, 2}}, {{2, 3, 3, 3}, {4, 3, 5, 5}, {2, 2, 2, 2}},
      {{3, 4, 1, 1}, {5, 4, 3, 3}, {1, 1, 1, 1}}, {{2, 3, 4, 4}, {4, 3, 3, 3}, {2, 2, 0, 0}}};
  std::uint64_t seed = 190;
  for (const Case& c : cases)
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + (relu ? " relu" : ""));
      Tensor x = randn(c.x, seed++), w = randn(c.w, seed++, 0.5f), b = randn({c.w[0]}, seed++);
      for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
      Conv2dOptions o = c.o;
      o.relu = relu;
      const Tensor y = conv2d(x, w, b, o);
      const Tensor r = randn(y.shape(), seed++);
      sum(mul(y, r)).backward();

      const onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
      const std::vector<float> bias = b.to_vector();
      std::vector<float> want = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias);
      std::vector<float> dy = r.to_vector();
      for (std::size_t i = 0; i < want.size(); ++i)
        if (relu && !(want[i] > 0.0f)) want[i] = 0.0f, dy[i] = 0.0f;
      const std::vector<float> got = y.to_vector();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << "output " << i;
      std::vector<float> want_db;
      const std::vector<float> want_dw = reference::conv2d_backward_weights(s, x.to_vector(), dy, &want_db);
      const std::vector<float> want_dx = reference::conv2d_backward_data(s, dy, w.to_vector());
      const std::vector<float> dx = x.grad().to_vector(), dw = w.grad().to_vector(),
                               db = b.grad().to_vector();
      for (std::size_t i = 0; i < want_dx.size(); ++i) ASSERT_NEAR(dx[i], want_dx[i], 1e-4f) << "dx " << i;
      for (std::size_t i = 0; i < want_dw.size(); ++i) ASSERT_NEAR(dw[i], want_dw[i], 1e-4f) << "dw " << i;
      for (std::size_t i = 0; i < want_db.size(); ++i) ASSERT_NEAR(db[i], want_db[i], 1e-4f) << "db " << i;
    }
}

// Within 2e-5 of the largest magnitude of `want`, elementwise: the direct loops' results in
// double against f32 sums of a few hundred products.
void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0;
  for (const float v : want) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5f * scale) << what << " " << i;
}

// Stride-1 3x3 layers train through Winograd convolutions (forward, input gradient, weight and
// bias gradients): paddings 1 and 0 (whose backward-data pass pads by 2), bias trained or
// frozen, fused ReLU, against the direct loops. Winograd's rounding grows with the magnitudes
// summed, so the bound is relative to each result's scale.
TEST(Autograd, WinogradConvolutionsMatchTheDirectLoop) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {{{3, 16, 16, 16}, {32, 16, 3, 3}, {1, 1, 1, 1}},
                        {{3, 32, 18, 17}, {16, 32, 3, 3}, {1, 1, 0, 0}}};
  std::uint64_t seed = 230;
  for (const Case& c : cases)
    for (const bool relu : {false, true})
      for (const bool bias_grad : {true, false}) {
        SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + (relu ? " relu" : "") +
                     (bias_grad ? "" : " frozen bias"));
        onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
        s.layout = onednn::ActivationLayout::nhwc;
        ASSERT_TRUE(conv::winograd_training_shape(s, conv::WinogradPass::forward));  // the path is taken
        ASSERT_TRUE(conv::winograd_training_shape(s, conv::WinogradPass::backward_data));
        Tensor x = randn(c.x, seed++), w = randn(c.w, seed++, 0.5f), b = randn({c.w[0]}, seed++);
        for (Tensor* t : {&x, &w}) t->set_requires_grad(true);
        b.set_requires_grad(bias_grad);
        Conv2dOptions o = c.o;
        o.relu = relu;
        const Tensor y = conv2d(x, w, b, o);
        const Tensor r = randn(y.shape(), seed++);
        sum(mul(y, r)).backward();

        const std::vector<float> bias = b.to_vector();
        std::vector<float> want = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias);
        std::vector<float> dy = r.to_vector();
        for (std::size_t i = 0; i < want.size(); ++i)
          if (relu && !(want[i] > 0.0f)) want[i] = 0.0f, dy[i] = 0.0f;
        expect_near(y.to_vector(), want, "output");
        std::vector<float> want_db;
        expect_near(x.grad().to_vector(), reference::conv2d_backward_data(s, dy, w.to_vector()), "dx");
        expect_near(w.grad().to_vector(), reference::conv2d_backward_weights(s, x.to_vector(), dy, &want_db),
                    "dw");
        if (bias_grad) expect_near(b.grad().to_vector(), want_db, "db");
      }
}

// Strided layers take their weight gradient from a native GEMM inside conv2d's backward: the
// tap-major one (dense/conv/tap_gemm_weight_grad.h) up to 128 input channels, the implicit GEMM
// (dense/conv/implicit_gemm_weight_grad.h) past them with 256+ output channels. Trained and frozen bias,
// fused ReLU, stride 2 with padding 1 and 0, against the direct loops.
TEST(Autograd, StridedWeightGradientPathsMatchTheDirectLoop) {
  struct Case {
    Shape x_shape, w_shape;
    bool tap_major;
  };
  std::uint64_t seed = 260;
  for (const Case& c :
       {Case{{2, 32, 9, 10}, {128, 32, 3, 3}, true}, Case{{2, 160, 9, 10}, {256, 160, 3, 3}, false}})
    for (const std::int64_t pad : {1, 0})
      for (const bool relu : {false, true}) {
        SCOPED_TRACE(std::string(c.tap_major ? "tap-major" : "implicit") + " pad " + std::to_string(pad) +
                     (relu ? " relu" : ""));
        const Conv2dOptions o{2, 2, pad, pad, 1, 1, 1, relu};
        onednn::ConvShape s = conv_shape_of(c.x_shape, c.w_shape, o);
        s.layout = onednn::ActivationLayout::nhwc;
        // The path is taken (the tap-major one on AVX-512 machines only).
        if (c.tap_major) {
          if (kernels::kernel_table().f32_conv_weight_grad_taps.level == IsaLevel::avx512) {
            ASSERT_TRUE(conv::tap_gemm_weight_grad_preferred(s));
          }
        } else {
          ASSERT_FALSE(conv::tap_gemm_weight_grad_preferred(s));
          ASSERT_TRUE(conv::implicit_gemm_weight_grad_preferred(s));
        }
        Tensor x = randn(c.x_shape, seed++), w = randn(c.w_shape, seed++, 0.5f),
               b = randn({c.w_shape[0]}, seed++);
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        const Tensor y = conv2d(x, w, b, o);
        const Tensor r = randn(y.shape(), seed++);
        sum(mul(y, r)).backward();
        const std::vector<float> bias = b.to_vector();
        const std::vector<float> out = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias);
        std::vector<float> dy = r.to_vector();
        for (std::size_t i = 0; i < dy.size(); ++i)
          if (relu && !(out[i] > 0.0f)) dy[i] = 0.0f;
        std::vector<float> want_db;
        const std::vector<float> want = reference::conv2d_backward_weights(s, x.to_vector(), dy, &want_db);
        const std::vector<float> dw = w.grad().to_vector(), db = b.grad().to_vector();
        float scale = 0;
        for (const float v : want) scale = std::max(scale, std::fabs(v));
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(dw[i], want[i], 2e-5f * scale) << "dw " << i;
        for (std::size_t i = 0; i < want_db.size(); ++i) ASSERT_NEAR(db[i], want_db[i], 1e-4f) << "db " << i;
      }
}

// ResNet's 1x1/2 shortcuts run backward-data on the pointwise GEMM (dense/conv/pointwise_conv.h) inside
// conv2d, and forward too with weights up to 128 KB (not layer4's 256 -> 512): output, input and
// weight gradients against the direct loops, with a trained bias, at sizes the stride does not
// divide (9x7 -> 5x4).
TEST(Autograd, PointwiseShortcutPathsMatchTheDirectLoop) {
  std::uint64_t seed = 270;
  for (const std::int64_t c : {64, 128, 256}) {
    SCOPED_TRACE(std::to_string(c) + " input channels");
    const Shape x_shape = {2, c, 9, 7}, w_shape = {2 * c, c, 1, 1};
    const Conv2dOptions o{2, 2, 0, 0};
    onednn::ConvShape s = conv_shape_of(x_shape, w_shape, o);
    s.layout = onednn::ActivationLayout::nhwc;
    if (kernels::kernel_table().f32_pointwise_tile.level == IsaLevel::avx512) {
      ASSERT_TRUE(conv::pointwise_conv_backward_data_preferred(s));
      ASSERT_EQ(conv::pointwise_conv_forward_preferred(s), c <= 128);
    }
    Tensor x = randn(x_shape, seed++), w = randn(w_shape, seed++, 0.5f), b = randn({w_shape[0]}, seed++);
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    const Tensor y = conv2d(x, w, b, o);
    const Tensor r = randn(y.shape(), seed++);
    sum(mul(y, r)).backward();
    const std::vector<float> bias = b.to_vector(), dy = r.to_vector();
    expect_near(y.to_vector(), reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias), "y");
    expect_near(x.grad().to_vector(), reference::conv2d_backward_data(s, dy, w.to_vector()), "dx");
    std::vector<float> want_db;
    expect_near(w.grad().to_vector(), reference::conv2d_backward_weights(s, x.to_vector(), dy, &want_db),
                "dw");
    expect_near(b.grad().to_vector(), want_db, "db");
  }
}

// oneDNN's blocked copy of a convolution's weights is cached under (data pointer, version). A
// weight tensor created where a freed one lived (an allocator hands the same block back) must
// not find the old tensor's copy: versions are unique across tensors. The reuse is staged
// without allocator luck: a new tensor (fresh TensorImpl) over the same storage, holding other
// values. Its output must match the direct loop with its own weights, in f32 and in bf16.
TEST(Autograd, ConvolutionWeightsAtAReusedAddressAreNotTakenFromTheCache) {
  const Shape xs = {2, 16, 6, 6}, ws = {16, 16, 3, 3};
  const Conv2dOptions o{1, 1, 1, 1};
  const onednn::ConvShape s = conv_shape_of(xs, ws, o);
  const Tensor x = randn(xs, 810);
  for (const bool bf16 : {false, true}) {
    if (bf16 && !onednn::bf16_compute_available()) continue;
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    std::optional<Bf16Autocast> autocast;
    if (bf16) autocast.emplace();
    const Tensor old_weights = randn(ws, 811);
    conv2d(x, old_weights, Tensor(), o);  // caches the blocked copy of the old values
    const std::vector<float> values = randn(ws, 812).to_vector();
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = old_weights.impl()->storage;
    impl->shape = ws;
    impl->strides = old_weights.strides();
    const Tensor w(impl);
    std::copy(values.begin(), values.end(), w.data());
    ASSERT_EQ(w.data(), old_weights.data());
    const std::vector<float> got = conv2d(x, w, Tensor(), o).to_vector();
    const std::vector<float> want = reference::conv2d_forward(s, x.to_vector(), values, nullptr);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], bf16 ? 0.3f : 1e-3f) << i;
  }
}

// Under Bf16Autocast, conv2d runs in bf16 (inputs and weights rounded to 8 mantissa bits, sums
// and output in f32): within bf16's rounding of the direct loop in double, and not equal to the
// f32 result (the bf16 kernels did run); with fused ReLU and bias, strided and padded. Skipped on
// CPUs without AVX512-BF16 or AMX, where the guard itself must throw.
TEST(Autograd, Bf16AutocastConvolutionsRoundTheirInputs) {
  if (!onednn::bf16_compute_available()) {
    EXPECT_THROW(Bf16Autocast guard, Error);
    GTEST_SKIP() << "this CPU has no bf16 kernels";
  }
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {{{2, 16, 9, 9}, {32, 16, 3, 3}, {1, 1, 1, 1}},
                        {{3, 3, 17, 17}, {16, 3, 7, 7}, {2, 2, 3, 3}}};
  std::uint64_t seed = 700;
  for (const Case& c : cases)
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + (relu ? " relu" : ""));
      Tensor x = channels_last_values(randn(c.x, seed++)), w = randn(c.w, seed++, 0.5f),
             b = randn({c.w[0]}, seed++);
      Conv2dOptions o = c.o;
      o.relu = relu;
      const onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
      const std::vector<float> bias = b.to_vector();
      std::vector<float> want = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias);
      if (relu)
        for (float& v : want) v = v > 0.0f ? v : 0.0f;
      const std::vector<float> exact = conv2d(x, w, b, o).to_vector();
      std::vector<float> got;
      {
        NoGradGuard no_grad;
        Bf16Autocast autocast;
        got = conv2d(x, w, b, o).to_vector();
      }
      // Each product carries up to 2^-8 relative error from the two roundings: bound the sum by
      // that of the absolute products.
      std::vector<float> ax = x.to_vector(), aw = w.to_vector();
      for (float& v : ax) v = std::fabs(v);
      for (float& v : aw) v = std::fabs(v);
      const std::vector<float> magnitude = reference::conv2d_forward(s, ax, aw, nullptr);
      ASSERT_EQ(got.size(), want.size());
      std::size_t differ = 0, nonzero = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-2f * magnitude[i] + 1e-5f) << "output " << i;
        differ += got[i] != exact[i];
        nonzero += exact[i] != 0.0f;
      }
      EXPECT_GT(differ, nonzero / 2) << "bf16 rounding should change most outputs";
    }
}

// In training under Bf16Autocast the backward passes of conv2d run in bf16 too (output gradient,
// source and weights rounded, sums in f32), as PyTorch's autocast training: input, weight and bias
// gradients within bf16 rounding of the direct loops, and different from the f32 gradients in
// most entries. A 3x3 padded layer and a 1x1 stride-2 downsample, with and without fused ReLU
// (whose mask is the computed output's); the strided layer's weight and bias gradients are
// computed in f32 by design (layers.cpp), equal to those of the f32 pass with the same mask.
TEST(Autograd, Bf16AutocastTrainsConvolutionsInBf16) {
  if (!onednn::bf16_compute_available()) GTEST_SKIP() << "this CPU has no bf16 kernels";
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {{{2, 16, 9, 9}, {32, 16, 3, 3}, {1, 1, 1, 1}},
                        {{2, 24, 8, 8}, {16, 24, 1, 1}, {2, 2, 0, 0}}};
  std::uint64_t seed = 720;
  for (const Case& c : cases)
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + (relu ? " relu" : ""));
      const Tensor x0 = randn(c.x, seed++), w0 = randn(c.w, seed++, 0.5f), b0 = randn({c.w[0]}, seed++);
      Conv2dOptions o = c.o;
      o.relu = relu;
      const onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
      const Tensor r = randn({s.batch, s.out_channels, s.out_height(), s.out_width()}, seed++);
      struct Pass {
        std::vector<float> y, dx, dw, db;
      };
      auto pass = [&](bool bf16) {
        Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        std::optional<Bf16Autocast> autocast;
        if (bf16) autocast.emplace();
        const Tensor y = conv2d(x, w, b, o);
        sum(mul(y, r)).backward();
        return Pass{y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
      };
      const Pass exact = pass(false), got = pass(true);
      // The gradient reaching the convolution: r where the (bf16) output passed the ReLU.
      std::vector<float> dy = r.to_vector();
      for (std::size_t i = 0; i < dy.size(); ++i)
        if (relu && !(got.y[i] > 0.0f)) dy[i] = 0.0f;
      std::vector<float> want_db;
      const std::vector<float> want_dw = reference::conv2d_backward_weights(s, x0.to_vector(), dy, &want_db);
      const std::vector<float> want_dx = reference::conv2d_backward_data(s, dy, w0.to_vector());
      // Error bounds: 2^-8 relative per rounded operand, on the sums of absolute products.
      std::vector<float> ax = x0.to_vector(), aw = w0.to_vector(), ady = dy;
      for (auto* v : {&ax, &aw, &ady})
        for (float& e : *v) e = std::fabs(e);
      std::vector<float> adb;
      const std::vector<float> mag_dw = reference::conv2d_backward_weights(s, ax, ady, &adb);
      const std::vector<float> mag_dx = reference::conv2d_backward_data(s, ady, aw);
      const bool strided = c.o.stride_h > 1;
      auto check = [](const char* name, const std::vector<float>& g, const std::vector<float>& want,
                      const std::vector<float>& mag, const std::vector<float>& f32) {
        ASSERT_EQ(g.size(), want.size()) << name;
        std::size_t differ = 0, nonzero = 0;  // a stride-2 1x1's dx is zero off its grid
        for (std::size_t i = 0; i < g.size(); ++i) {
          ASSERT_NEAR(g[i], want[i], 2e-2f * mag[i] + 1e-5f) << name << " " << i;
          differ += g[i] != f32[i];
          nonzero += f32[i] != 0.0f;
        }
        EXPECT_GT(differ, nonzero / 2) << name << ": bf16 rounding should change most entries";
      };
      check("dx", got.dx, want_dx, mag_dx, exact.dx);
      if (!strided) {
        check("dw", got.dw, want_dw, mag_dw, exact.dw);
        check("db", got.db, want_db, adb, exact.db);
      } else {
        for (std::size_t i = 0; i < want_dw.size(); ++i)
          ASSERT_NEAR(got.dw[i], want_dw[i], 1e-4f) << "dw " << i;
        for (std::size_t i = 0; i < want_db.size(); ++i)
          ASSERT_NEAR(got.db[i], want_db[i], 1e-4f) << "db " << i;
      }
    }
}

// Under Bf16Autocast, linear layers on oneDNN (not the narrow kernels) and convolutions run as
// whole-map products are bf16 too, forward and backward, as torch.autocast runs linear and
// matmul: outputs and input gradients within bf16 rounding of the f32 pass and different from it
// in most entries.
TEST(Autograd, Bf16AutocastCoversLinearLayersAndWholeMapProducts) {
  if (!onednn::bf16_compute_available()) GTEST_SKIP() << "this CPU has no bf16 kernels";
  struct Pass {
    std::vector<float> y, dx;
  };
  auto run = [](const std::function<Tensor(const Tensor&)>& f, const Tensor& x0, bool bf16) {
    Tensor x = x0.clone();
    x.set_requires_grad(true);
    std::optional<Bf16Autocast> autocast;
    if (bf16) autocast.emplace();
    const Tensor y = f(x);
    sum(mul(y, y)).backward();
    return Pass{y.to_vector(), x.grad().to_vector()};
  };
  const Tensor w = randn({48, 40}, 730, 0.3f), b = randn({48}, 731);
  const Tensor cw = randn({24, 16, 3, 3}, 732, 0.3f);
  const std::pair<const char*, std::function<Tensor(const Tensor&)>> layers[] = {
      {"linear", [&](const Tensor& x) { return linear(x, w, b); }},
      {"whole-map conv2d", [&](const Tensor& x) {
         return conv2d(x, cw, Tensor(), Conv2dOptions{1, 1, 1, 1});
       }}};
  const Tensor inputs[] = {randn({12, 40}, 733), randn({6, 16, 2, 2}, 734)};
  for (std::size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(layers[i].first);
    const Pass exact = run(layers[i].second, inputs[i], false), got = run(layers[i].second, inputs[i], true);
    for (const auto& [name, g, e] :
         {std::tuple{"y", &got.y, &exact.y}, std::tuple{"dx", &got.dx, &exact.dx}}) {
      ASSERT_EQ(g->size(), e->size());
      float scale = 0.0f;
      for (float v : *e) scale = std::max(scale, std::fabs(v));
      std::size_t differ = 0;
      for (std::size_t j = 0; j < g->size(); ++j) {
        ASSERT_NEAR((*g)[j], (*e)[j], 3e-2f * scale) << name << " " << j;
        differ += (*g)[j] != (*e)[j];
      }
      EXPECT_GT(differ, g->size() / 2) << name << ": bf16 rounding should change most entries";
    }
  }
}

// A bf16 linear layer keeps its weights' bf16 copy between calls (inference): the copy must follow
// an in-place update (set bumps the version) and must not serve another weight tensor of the same
// shape. Each output against the f32 layer with the weights of that moment, within bf16 rounding.
TEST(Autograd, Bf16LinearWeightsCopyFollowsUpdatesAndBelongsToOneTensor) {
  if (!onednn::bf16_compute_available()) GTEST_SKIP() << "this CPU has no bf16 kernels";
  const Tensor x = randn({8, 64}, 740);
  Tensor w = randn({32, 64}, 741, 0.3f);
  const Tensor other = randn({32, 64}, 742, 0.3f);
  auto expect_bf16_of = [&](const Tensor& weights, const char* what) {
    std::vector<float> want, got;
    {
      NoGradGuard no_grad;
      want = linear(x, weights).to_vector();
      Bf16Autocast autocast;
      got = linear(x, weights).to_vector();
    }
    float scale = 0.0f;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-2f * scale) << what << " " << i;
  };
  expect_bf16_of(w, "first call");
  for (std::int64_t j = 0; j < 64; ++j) w.set({3, j}, 4.0f);  // row 3 changes in place
  expect_bf16_of(w, "after the update");
  expect_bf16_of(other, "another tensor of the same shape");
  expect_bf16_of(w, "back to the first");
}

// Pooling a channels-last input (a convolution's output) gives exactly the values and gradients
// of pooling its row-major copy: channel counts oneDNN vectorises (16) and those the native
// kernel takes (1, 3, 6), with and without padding and overlapping windows. Where windows
// overlap, an input's gradient is a sum whose order differs between the native kernel and
// oneDNN's (whose order depends on the ISA it picks): equal to float rounding, not bit for bit.
TEST(Autograd, ChannelsLastPoolingMatchesRowMajor) {
  struct Case {
    Shape x;
    std::int64_t kernel, stride, padding;
  };
  const Case cases[] = {{{3, 6, 8, 10}, 2, 2, 0},
                        {{2, 3, 7, 7}, 3, 2, 1},
                        {{2, 16, 6, 6}, 2, 2, 0},
                        {{2, 6, 5, 5}, 3, 1, 1},
                        {{1, 5, 9, 4}, 3, 3, 0}};
  std::uint64_t seed = 170;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_text(c.x) + " kernel " + std::to_string(c.kernel) + " stride " +
                 std::to_string(c.stride) + " padding " + std::to_string(c.padding));
    const Tensor x = distinct(c.x, seed++);
    std::vector<std::vector<float>> values, grads;
    for (const Tensor& input : {x.clone(), channels_last_values(x.clone())}) {
      Tensor leaf = input.detach();
      leaf.set_requires_grad(true);
      const Tensor y = max_pool2d(leaf, c.kernel, c.stride, c.padding);
      sum(mul(y, randn(y.shape(), seed))).backward();
      values.push_back(y.to_vector());
      grads.push_back(leaf.grad().to_vector());
    }
    EXPECT_EQ(values[0], values[1]);
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (std::size_t i = 0; i < grads[0].size(); ++i)
      ASSERT_NEAR(grads[0][i], grads[1][i], 1e-5f * (1.0f + std::fabs(grads[0][i]))) << "element " << i;
  }
}

// CPUDL_PROFILE's table: each op's forward once with the FLOPs of its dense work, each node's
// backward, the optimiser step, and composite ops charged once (mse_loss, not its sub and mul).
TEST(Autograd, OpProfileChargesEachOpOnce) {
  Tensor w = randn({4, 3, 3, 3}, 180, 0.5f);
  w.set_requires_grad(true);
  const Tensor x = randn({2, 3, 6, 6}, 181);
  enable_op_profile(true);
  reset_op_profile();
  const Tensor y = conv2d(x, w, Tensor(), {1, 1, 1, 1});
  mse_loss(y, Tensor::zeros(y.shape())).backward();
  enable_op_profile(false);
  std::map<std::string, OpTime> by;
  for (const OpTime& t : op_profile()) by[t.phase + " " + t.op] = t;
  reset_op_profile();
  ASSERT_TRUE(by.count("forward conv2d"));
  EXPECT_EQ(by["forward conv2d"].calls, 1);
  EXPECT_DOUBLE_EQ(by["forward conv2d"].flops, 2.0 * 2 * 4 * 6 * 6 * 3 * 3 * 3);
  EXPECT_EQ(by["backward conv2d"].calls, 1);
  EXPECT_EQ(by["forward mse_loss"].calls, 1);
  EXPECT_EQ(by.count("forward sub") + by.count("forward mul"), 0u) << "nested ops charged twice";
  for (const auto& [key, t] : by) EXPECT_GE(t.seconds, 0.0) << key;
}

// First layers (1-4 input channels) whose images need no gradient run on the planar kernels, NCHW
// out from 16 channels on and channels-last below (LeNet-5's 6: transposed per image); with an
// input that needs one, the channels-last weight-gradient kernel (16+ outputs, stride 1) or oneDNN. Values,
// dW and db against the direct loops in double, with and without the fused ReLU, with padding,
// stride, dilation, cropping and a batch that does not split evenly over the threads.
TEST(Autograd, FirstLayerWeightGradientsMatchTheDirectLoop) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    bool x_grad;
  };
  const Case cases[] = {{{5, 1, 12, 12}, {32, 1, 3, 3}, {}, false},
                        {{3, 3, 9, 7}, {16, 3, 3, 3}, {2, 2, 1, 1}, false},
                        {{2, 2, 8, 8}, {33, 2, 3, 3}, {1, 1, 2, 2, 2, 2}, false},
                        {{3, 4, 1, 1}, {20, 4, 3, 3}, {1, 1, 1, 1}, false},
                        {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1, 2, 2}, false},
                        {{3, 3, 9, 17}, {5, 3, 3, 3}, {1, 1, 1, 1}, false},
                        {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1, 2, 2}, true},
                        {{2, 3, 10, 11}, {70, 3, 3, 3}, {1, 1, 1, 1}, true}};
  std::uint64_t seed = 190;
  for (const Case& c : cases)
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + (relu ? " relu" : "") +
                   (c.x_grad ? " dx" : ""));
      Tensor x = randn(c.x, seed++), w = randn(c.w, seed++, 0.5f), b = randn({c.w[0]}, seed++);
      x.set_requires_grad(c.x_grad);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      Conv2dOptions o = c.o;
      o.relu = relu;
      const Tensor y = conv2d(x, w, b, o);
      const Tensor g = randn(y.shape(), seed++);
      sum(mul(y, g)).backward();
      const onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
      // The layout the next op gets: channels-last unless a planar first layer (stride 1, no
      // dilation, no input gradient) has 16+ outputs.
      if (y.size(2) * y.size(3) > 1) {
        const bool planar = !c.x_grad && c.o.stride_h == 1 && c.o.dilation_h == 1;
        EXPECT_EQ(is_channels_last(y) && !y.is_contiguous(), !planar || c.w[0] < 16);
      }
      const std::vector<float> bias = b.to_vector(), got = y.to_vector();
      std::vector<float> want = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias),
                         dy = g.to_vector();
      for (std::size_t i = 0; i < want.size(); ++i)
        if (relu && !(want[i] > 0.0f)) want[i] = 0.0f, dy[i] = 0.0f;
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << "output " << i;
      std::vector<float> want_db;
      const std::vector<float> want_dw = reference::conv2d_backward_weights(s, x.to_vector(), dy, &want_db);
      const std::vector<float> dw = w.grad().to_vector(), db = b.grad().to_vector();
      ASSERT_EQ(dw.size(), want_dw.size());
      for (std::size_t i = 0; i < dw.size(); ++i)
        ASSERT_NEAR(dw[i], want_dw[i], 1e-3f * (1 + std::fabs(want_dw[i]))) << i;
      for (std::size_t i = 0; i < db.size(); ++i)
        ASSERT_NEAR(db[i], want_db[i], 1e-3f * (1 + std::fabs(want_db[i]))) << i;
    }
}

// got and want hold the same values, to a relative tolerance (the fused ops sum in another order).
void expect_same_values(const Tensor& got, const Tensor& want, float rtol, const char* what) {
  const std::vector<float> a = got.to_vector(), b = want.to_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], rtol * (1 + std::fabs(b[i]))) << what << " " << i;
}

// Conv2dOptions::relu against relu(conv2d(..)): values and every gradient, on the planar
// first-layer path (images that need no gradient) and on oneDNN's path (an input that does,
// and more input channels than the planar kernels take).
TEST(Autograd, FusedReluConvolutionMatchesReluOfConvolution) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    bool x_grad;
  };
  const Case cases[] = {{{3, 1, 12, 12}, {32, 1, 3, 3}, {}, false},
                        {{2, 1, 14, 14}, {6, 1, 5, 5}, {1, 1, 2, 2}, false},
                        {{2, 1, 14, 14}, {6, 1, 5, 5}, {1, 1, 2, 2}, true},
                        {{2, 6, 9, 9}, {16, 6, 5, 5}, {}, true},
                        {{2, 6, 9, 9}, {16, 6, 3, 3}, {2, 2, 1, 1}, false}};
  std::uint64_t seed = 410;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + (c.x_grad ? " input gradient" : ""));
    const Tensor x0 = randn(c.x, seed++), w0 = randn(c.w, seed++, 0.5f), b0 = randn({c.w[0]}, seed++);
    const Tensor g = randn({c.x[0], c.w[0], 1, 1}, seed++);  // broadcast: any output shape
    Tensor outs[2], grads[2][3];
    for (int fused = 0; fused < 2; ++fused) {
      Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
      x.set_requires_grad(c.x_grad);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      Conv2dOptions o = c.o;
      o.relu = fused == 1;
      outs[fused] = fused ? conv2d(x, w, b, o) : relu(conv2d(x, w, b, o));
      sum(mul(outs[fused], g)).backward();
      grads[fused][0] = c.x_grad ? x.grad() : Tensor();
      grads[fused][1] = w.grad();
      grads[fused][2] = b.grad();
    }
    const auto expect_close = [](const Tensor& got, const Tensor& want, const char* what) {
      expect_same_values(got, want, 1e-3f, what);
    };
    expect_close(outs[1], outs[0], "output");
    std::size_t zeros = 0;
    for (const float v : outs[1].to_vector()) zeros += v == 0.0f;
    EXPECT_GT(zeros, 0u);  // the ReLU clipped something
    if (c.x_grad) expect_close(grads[1][0], grads[0][0], "input gradient");
    expect_close(grads[1][1], grads[0][1], "weight gradient");
    expect_close(grads[1][2], grads[0][2], "bias gradient");
  }
}

// linear_relu against relu(linear(..)): values and every gradient, on oneDNN's inner product
// (its ReLU post-op) and on the narrow kernels (many inputs, few outputs), with and without bias.
TEST(Autograd, FusedReluLinearMatchesReluOfLinear) {
  struct Case {
    std::int64_t rows, in, out;
    bool bias;
  };
  const Case cases[] = {{6, 20, 12, true}, {5, 1100, 10, true}, {4, 30, 7, false}, {3, 1030, 16, false}};
  std::uint64_t seed = 520;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.in) + " -> " + std::to_string(c.out));
    const Tensor x0 = randn({c.rows, c.in}, seed++), w0 = randn({c.out, c.in}, seed++, 0.1f),
                 b0 = randn({c.out}, seed++, 0.5f), g = randn({c.rows, c.out}, seed++);
    Tensor outs[2], grads[2][3];
    for (int fused = 0; fused < 2; ++fused) {
      Tensor x = x0.clone(), w = w0.clone(), b = c.bias ? b0.clone() : Tensor();
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      if (c.bias) b.set_requires_grad(true);
      outs[fused] = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
      sum(mul(outs[fused], g)).backward();
      grads[fused][0] = x.grad();
      grads[fused][1] = w.grad();
      grads[fused][2] = c.bias ? b.grad() : Tensor();
    }
    const auto expect_close = [](const Tensor& got, const Tensor& want, const char* what) {
      expect_same_values(got, want, 1e-4f, what);
    };
    expect_close(outs[1], outs[0], "output");
    std::size_t zeros = 0;
    for (const float v : outs[1].to_vector()) zeros += v == 0.0f;
    EXPECT_GT(zeros, 0u);  // the ReLU clipped something
    expect_close(grads[1][0], grads[0][0], "input gradient");
    expect_close(grads[1][1], grads[0][1], "weight gradient");
    if (c.bias) expect_close(grads[1][2], grads[0][2], "bias gradient");
  }
}

// A classifier with many inputs and few outputs runs on the narrow kernels: its output and
// all three gradients against direct double-precision loops.
// conv2d_relu_linear (a first layer fused with a narrow classifier, recomputing the activation
// in the backward pass) against the direct loops in double: the logits and the gradients of
// both layers' weights and biases. Batches that do not fill the pieces of images, a row wider
// than a vector, three input channels with padding, absent biases; then the shapes that fall
// back to the three ops (an input that needs a gradient, a classifier with 20 outputs).
TEST(Autograd, FusedFirstLayerAndClassifierMatchTheDirectLoops) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    std::int64_t classes;
    bool conv_bias, fc_bias, x_grad;
  };
  const Case cases[] = {{{9, 1, 12, 12}, {16, 1, 3, 3}, {}, 10, true, true, false},
                        {{5, 3, 9, 17}, {20, 3, 3, 3}, {1, 1, 1, 1}, 1, false, false, false},
                        {{3, 1, 8, 8}, {16, 1, 3, 3}, {}, 10, true, true, true},
                        {{2, 2, 6, 6}, {16, 2, 3, 3}, {}, 20, true, true, false}};
  std::uint64_t seed = 600;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_text(c.x) + " * " + shape_text(c.w) + " -> " + std::to_string(c.classes));
    const onednn::ConvShape s = conv_shape_of(c.x, c.w, c.o);
    const std::int64_t k = s.out_channels * s.out_height() * s.out_width();
    Tensor x = randn(c.x, seed++), w = randn(c.w, seed++, 0.5f), fw = randn({c.classes, k}, seed++, 0.05f);
    Tensor b = c.conv_bias ? randn({c.w[0]}, seed++) : Tensor(),
           fb = c.fc_bias ? randn({c.classes}, seed++) : Tensor();
    for (Tensor* t : {&w, &b, &fw, &fb})
      if (t->defined()) t->set_requires_grad(true);
    x.set_requires_grad(c.x_grad);
    const Tensor y = conv2d_relu_linear(x, w, b, c.o, fw, fb);
    ASSERT_EQ(y.shape(), (Shape{c.x[0], c.classes}));
    const Tensor g = randn(y.shape(), seed++);
    sum(mul(y, g)).backward();

    const std::vector<float> bias = b.defined() ? b.to_vector() : std::vector<float>(c.w[0], 0.0f);
    std::vector<float> act = reference::conv2d_forward(s, x.to_vector(), w.to_vector(), &bias);
    for (float& v : act) v = v > 0.0f ? v : 0.0f;
    const std::vector<float> fwv = fw.to_vector(), gv = g.to_vector(), yv = y.to_vector();
    const std::int64_t n = c.x[0], m = c.classes;
    std::vector<float> dact(act.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        double want = fb.defined() ? fb.to_vector()[j] : 0.0;
        for (std::int64_t p = 0; p < k; ++p) want += double(act[i * k + p]) * fwv[j * k + p];
        ASSERT_NEAR(yv[i * m + j], want, 1e-3 * (1 + std::fabs(want))) << "logit " << i << "," << j;
      }
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < k; ++p) {
        double d = 0;
        for (std::int64_t j = 0; j < m; ++j) d += double(gv[i * m + j]) * fwv[j * k + p];
        dact[i * k + p] = act[i * k + p] > 0.0f ? static_cast<float>(d) : 0.0f;
      }
    const std::vector<float> dfw = fw.grad().to_vector();
    for (std::int64_t j = 0; j < m; ++j)
      for (std::int64_t p = 0; p < k; ++p) {
        double want = 0;
        for (std::int64_t i = 0; i < n; ++i) want += double(gv[i * m + j]) * act[i * k + p];
        ASSERT_NEAR(dfw[j * k + p], want, 1e-3 * (1 + std::fabs(want))) << "fc weight " << j << "," << p;
      }
    if (fb.defined()) {
      for (std::int64_t j = 0; j < m; ++j) {
        double want = 0;
        for (std::int64_t i = 0; i < n; ++i) want += gv[i * m + j];
        ASSERT_NEAR(fb.grad().to_vector()[j], want, 1e-4 * (1 + std::fabs(want)));
      }
    }
    std::vector<float> want_db;
    const std::vector<float> want_dw = reference::conv2d_backward_weights(s, x.to_vector(), dact, &want_db);
    const std::vector<float> dw = w.grad().to_vector();
    for (std::size_t i = 0; i < want_dw.size(); ++i)
      ASSERT_NEAR(dw[i], want_dw[i], 1e-3 * (1 + std::fabs(want_dw[i]))) << "conv weight " << i;
    if (b.defined()) {
      for (std::size_t i = 0; i < want_db.size(); ++i)
        ASSERT_NEAR(b.grad().to_vector()[i], want_db[i], 1e-3 * (1 + std::fabs(want_db[i])))
            << "conv bias " << i;
    }
    EXPECT_EQ(x.grad().defined(), c.x_grad);
    if (c.x_grad) {
      const std::vector<float> want_dx = reference::conv2d_backward_data(s, dact, w.to_vector()),
                               dx = x.grad().to_vector();
      for (std::size_t i = 0; i < want_dx.size(); ++i)
        ASSERT_NEAR(dx[i], want_dx[i], 1e-3 * (1 + std::fabs(want_dx[i])));
    }
  }
}

TEST(Autograd, NarrowLinearLayerMatchesTheDirectLoops) {
  const std::int64_t m = 5, k = 1100, n = 10;
  Tensor x = randn({m, k}, 501), w = randn({n, k}, 502, 0.05f), b = randn({n}, 503);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  const Tensor y = linear(x, w, b);
  const Tensor g = randn({m, n}, 504);
  sum(mul(y, g)).backward();
  const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector(), gv = g.to_vector();
  const std::vector<float> yv = y.to_vector(), dx = x.grad().to_vector(), dw = w.grad().to_vector(),
                           db = b.grad().to_vector();
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double want = bv[j];
      for (std::int64_t p = 0; p < k; ++p) want += double(xv[i * k + p]) * wv[j * k + p];
      ASSERT_NEAR(yv[i * n + j], want, 1e-3 * (1 + std::fabs(want)));
    }
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p) {
      double want = 0;
      for (std::int64_t j = 0; j < n; ++j) want += double(gv[i * n + j]) * wv[j * k + p];
      ASSERT_NEAR(dx[i * k + p], want, 1e-4 * (1 + std::fabs(want)));
    }
  for (std::int64_t j = 0; j < n; ++j) {
    double want_b = 0;
    for (std::int64_t i = 0; i < m; ++i) want_b += gv[i * n + j];
    ASSERT_NEAR(db[j], want_b, 1e-4 * (1 + std::fabs(want_b)));
    for (std::int64_t p = 0; p < k; ++p) {
      double want = 0;
      for (std::int64_t i = 0; i < m; ++i) want += double(gv[i * n + j]) * xv[i * k + p];
      ASSERT_NEAR(dw[j * k + p], want, 1e-4 * (1 + std::fabs(want)));
    }
  }
}

TEST(Autograd, Normalisation) {
  check_gradients(
      "batch_norm2d training",
      [](auto& v) { return batch_norm2d(v[0], Tensor(), Tensor(), v[1], v[2], true); },
      {randn({4, 3, 2, 2}, 91), add(randn({3}, 92, 0.2f), 1.0f).detach(), randn({3}, 93)}, 1e-2, 3e-2);
  const Tensor rm = randn({3}, 94, 0.1f), rv = add(exp(randn({3}, 95, 0.3f)), 0.0f).detach();
  check_gradients("batch_norm2d inference",
                  [rm, rv](auto& v) { return batch_norm2d(v[0], rm, rv, v[1], v[2], false); },
                  {randn({2, 3, 2, 2}, 96), randn({3}, 97), randn({3}, 98)});
  check_gradients(
      "layer_norm", [](auto& v) { return layer_norm(v[0], 1, v[1], v[2]); },
      {randn({3, 6}, 99), randn({6}, 100), randn({6}, 101)}, 1e-2, 2e-2);
  check_gradients(
      "layer_norm 2 dims, no affine", [](auto& v) { return layer_norm(v[0], 2); }, {randn({2, 3, 4}, 102)},
      1e-2, 2e-2);
}

// batch_norm2d's fused ReLU (oneDNN's fuse_norm_relu in training, the inference activation
// otherwise) against relu(batch_norm2d(..)): values, input, scale and shift gradients, running
// statistics, in training and inference, on NCHW and channels-last inputs (a convolution's output).
TEST(Autograd, FusedReluBatchNormMatchesReluOfBatchNorm) {
  const Tensor x0 = randn({4, 16, 5, 6}, 140), w0 = add(randn({16}, 141, 0.2f), 1.0f).detach(),
               b0 = randn({16}, 142, 0.5f), g = randn({4, 16, 5, 6}, 143);
  for (const bool training : {true, false})
    for (const bool channels_last : {false, true}) {
      SCOPED_TRACE(std::string(training ? "training" : "inference") +
                   (channels_last ? " channels-last" : ""));
      Tensor outs[2], grads[2][3], stats[2][2];
      for (int fused = 0; fused < 2; ++fused) {
        Tensor x = channels_last ? channels_last_values(x0.clone()) : x0.clone(), w = w0.clone(),
               b = b0.clone();
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        Tensor rm = randn({16}, 144, 0.1f).detach(), rv = add(exp(randn({16}, 145, 0.3f)), 0.0f).detach();
        outs[fused] = fused ? batch_norm2d(x, rm, rv, w, b, training, 0.1f, 1e-5f, true)
                            : relu(batch_norm2d(x, rm, rv, w, b, training));
        sum(mul(outs[fused], g)).backward();
        grads[fused][0] = x.grad(), grads[fused][1] = w.grad(), grads[fused][2] = b.grad();
        stats[fused][0] = rm, stats[fused][1] = rv;
      }
      expect_same_values(outs[1], outs[0], 1e-5f, "output");
      expect_same_values(grads[1][0], grads[0][0], 1e-4f, "dx");
      expect_same_values(grads[1][1], grads[0][1], 1e-4f, "dscale");
      expect_same_values(grads[1][2], grads[0][2], 1e-4f, "dshift");
      expect_same_values(stats[1][0], stats[0][0], 1e-6f, "running_mean");
      expect_same_values(stats[1][1], stats[0][1], 1e-6f, "running_var");
    }
}

// Conv, batch norm (training), ReLU and a residual add composed, as in a ResNet block.
TEST(Autograd, ResidualBlockWithBatchNorm) {
  check_gradients(
      "residual block",
      [](auto& v) {
        Tensor h = relu(batch_norm2d(conv2d(v[0], v[1], Tensor(), {1, 1, 1, 1}), Tensor(), Tensor(), v[2],
                                     Tensor(), true));
        h = batch_norm2d(conv2d(h, v[3], Tensor(), {1, 1, 1, 1}), Tensor(), Tensor(), v[4], Tensor(), true);
        return relu(add(h, v[0]));
      },
      {randn({2, 3, 4, 4}, 131), randn({3, 3, 3, 3}, 132, 0.3f), add(randn({3}, 133, 0.1f), 1.0f).detach(),
       randn({3, 3, 3, 3}, 134, 0.3f), add(randn({3}, 135, 0.1f), 1.0f).detach()},
      1e-3, 3e-2);
}

TEST(Autograd, EmbeddingConcatDropout) {
  const std::vector<std::int64_t> idx = {3, 0, 3, 1, 4, 2};
  const Tensor indices = Tensor::from_buffer(idx.data(), {2, 3}, DType::i64);
  check_gradients("embedding", [indices](auto& v) { return embedding(indices, v[0]); }, {randn({5, 4}, 111)});
  check_gradients("concat",
                  [](auto& v) {
                    return concat({v[0], v[1]}, 1);
                  },
                  {randn({2, 3}, 112), randn({2, 2}, 113)});
  // Dropout: the same mask on forward and backward, mean preserved, identity in eval.
  Generator g(5);
  Tensor x = Tensor::ones({20000});
  x.set_requires_grad();
  Tensor y = dropout(x, 0.25f, true, g);
  const auto yv = y.to_vector();
  double mean_y = 0;
  for (float v : yv) mean_y += v / 20000.0;
  EXPECT_NEAR(mean_y, 1.0, 0.03);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), yv);  // d/dx of mask * x is the mask, and y = mask here
  EXPECT_EQ(dropout(x, 0.5f, false).impl(), x.impl());
  EXPECT_THROW(dropout(x, 1.5f, true), Error);
}

TEST(Autograd, BatchNormUpdatesRunningStatisticsAsPyTorch) {
  const Tensor x = randn({4, 2, 3, 3}, 120, 2.0f);
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  batch_norm2d(x, rm, rv, Tensor(), Tensor(), true, 0.1f);
  // Reference: per-channel batch mean and unbiased variance.
  for (std::int64_t c = 0; c < 2; ++c) {
    double m = 0, v = 0;
    const std::int64_t count = 4 * 9;
    for (std::int64_t n = 0; n < 4; ++n)
      for (std::int64_t i = 0; i < 9; ++i) m += x.data()[(n * 2 + c) * 9 + i] / static_cast<double>(count);
    for (std::int64_t n = 0; n < 4; ++n)
      for (std::int64_t i = 0; i < 9; ++i)
        v += std::pow(x.data()[(n * 2 + c) * 9 + i] - m, 2) / static_cast<double>(count - 1);
    EXPECT_NEAR(rm.data()[c], 0.1 * m, 1e-5);
    EXPECT_NEAR(rv.data()[c], 0.9 + 0.1 * v, 1e-4);
  }
}

TEST(Autograd, CrossEntropyMatchesLogSoftmaxNll) {
  const Tensor logits = randn({6, 7}, 70, 2.0f);
  const std::vector<std::int32_t> labels = {0, 6, 3, 3, 1, 2};
  const Tensor target = Tensor::from_buffer(labels.data(), {6}, DType::i32);
  EXPECT_NEAR(cross_entropy(logits, target).item(), nll_loss(log_softmax(logits), target).item(), 1e-5);
}

TEST(Autograd, GradientsAccumulateAndGraphIsFreed) {
  Tensor x = randn({3}, 71);
  x.set_requires_grad();
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  const std::vector<float> once = x.grad().to_vector();
  y.backward();
  const std::vector<float> twice = x.grad().to_vector();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  try {
    y.backward();
    FAIL() << "a freed graph must not run again";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a second time"), std::string::npos) << e.what();
  }
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, ThousandStepsDoNotGrowTheGraph) {
  // A tiny regression trained by hand: loss must fall and no autograd node may survive a step.
  Tensor w = Tensor::zeros({3, 1});
  w.set_requires_grad();
  const Tensor x = randn({16, 3}, 72);
  const Tensor y = matmul(x, Tensor::from_vector({1.0f, -2.0f, 0.5f}, {3, 1}));
  const std::int64_t baseline = autograd::live_nodes();
  float first = 0, last = 0;
  for (int step = 0; step < 1000; ++step) {
    Tensor loss = mse_loss(matmul(x, w), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    {
      NoGradGuard no_grad;
      add_(w, mul(w.grad(), -0.05f));
    }
    w.zero_grad();
  }
  EXPECT_LT(last, first * 1e-3);
  EXPECT_LE(autograd::live_nodes(), baseline + 1);  // at most w's gradient accumulator
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = randn({3}, 73);
  x.set_requires_grad();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(mul(x, x).requires_grad());
  }
  EXPECT_TRUE(mul(x, x).requires_grad());
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(mul(x, x).is_leaf());
}

TEST(Autograd, ErrorsNameTheProblem) {
  const Tensor x = randn({3}, 74);
  try {
    sum(x).backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not require grad"), std::string::npos) << e.what();
  }
  Tensor y = randn({3}, 75);
  y.set_requires_grad();
  EXPECT_THROW(mul(y, y).backward(), Error);  // non-scalar without an explicit gradient
  const std::vector<std::int64_t> bad = {5};
  try {
    cross_entropy(randn({1, 3}, 76), Tensor::from_buffer(bad.data(), {1}, DType::i64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cross_entropy: target 5 at position 0 is out of range [0, 3)");
  }
  EXPECT_THROW(linear(randn({2, 5}, 77), randn({3, 4}, 78)), Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::i32).set_requires_grad(), Error);
}

}  // namespace
}  // namespace cpudl
