// cpudl against PyTorch 1.13: fixtures in tests/golden/ were written by scripts/gen-golden.py.
// Every op's output and input gradients, the zoo models' logits and parameter gradients, and 20
// optimiser steps of SimpleCNN and LeNet-5 (losses and final weights).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "cpudl/autograd.h"
#include "cpudl/io.h"
#include "cpudl/nn.h"
#include "cpudl/optim.h"

namespace cpudl {
namespace {

const std::string kGolden = std::string(CPUDL_FIXTURES_DIR) + "/../golden/";

std::map<std::string, Tensor> load(const std::string& file) {
  const io::SafetensorsFile f = io::load_safetensors(kGolden + file);
  return std::map<std::string, Tensor>(f.tensors.begin(), f.tensors.end());
}

// |got - want| <= tolerance * max |want|: relative to the tensor's own scale, however small.
void expect_close(const Tensor& got, const Tensor& want, double tolerance, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": no tensor";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector(), w = want.to_vector();
  double scale = 1e-30;
  for (float v : w) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tolerance * scale) << what << " element " << i;
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

std::map<std::string, Op> golden_ops() {
  const std::vector<std::int64_t> label_values = {2, 0, 4, 1}, index_values = {3, 0, 3, 1, 4, 2};
  const Tensor labels = Tensor::from_buffer(label_values.data(), {4}, DType::i64);
  const Tensor indices = Tensor::from_buffer(index_values.data(), {2, 3}, DType::i64);
  return {
      {"add", [](auto& v) { return add(v[0], v[1]); }},
      {"sub", [](auto& v) { return sub(v[0], v[1]); }},
      {"mul", [](auto& v) { return mul(v[0], v[1]); }},
      {"div", [](auto& v) { return div(v[0], v[1]); }},
      {"matmul", [](auto& v) { return matmul(v[0], v[1]); }},
      {"exp", [](auto& v) { return exp(v[0]); }},
      {"log", [](auto& v) { return log(v[0]); }},
      {"sqrt", [](auto& v) { return sqrt(v[0]); }},
      {"pow", [](auto& v) { return pow(v[0], 3.0f); }},
      {"clamp", [](auto& v) { return clamp(v[0], -0.5f, 0.8f); }},
      {"relu", [](auto& v) { return relu(v[0]); }},
      {"leaky_relu", [](auto& v) { return leaky_relu(v[0], 0.1f); }},
      {"gelu", [](auto& v) { return gelu(v[0]); }},
      {"sigmoid", [](auto& v) { return sigmoid(v[0]); }},
      {"tanh", [](auto& v) { return tanh(v[0]); }},
      {"softmax", [](auto& v) { return softmax(v[0], -1); }},
      {"log_softmax", [](auto& v) { return log_softmax(v[0], 1); }},
      {"sum",
       [](auto& v) {
         return sum(v[0], {0, 2});
       }},
      {"mean", [](auto& v) { return mean(v[0], {1}); }},
      {"max", [](auto& v) { return max(v[0], 1); }},
      {"linear", [](auto& v) { return linear(v[0], v[1], v[2]); }},
      {"conv2d",
       [](auto& v) {
         return conv2d(v[0], v[1], v[2], {2, 2, 1, 1, 1, 1, 2});
       }},
      {"conv2d_dilated",
       [](auto& v) {
         return conv2d(v[0], v[1], Tensor(), {1, 1, 2, 2, 2, 2, 1});
       }},
      {"max_pool2d", [](auto& v) { return max_pool2d(v[0], 3, 2, 1); }},
      {"avg_pool2d", [](auto& v) { return avg_pool2d(v[0], 3, 2, 1); }},
      {"adaptive_avg_pool2d", [](auto& v) { return adaptive_avg_pool2d(v[0], 3, 2); }},
      {"batch_norm2d", [](auto& v) { return batch_norm2d(v[0], Tensor(), Tensor(), v[1], v[2], true); }},
      {"layer_norm", [](auto& v) { return layer_norm(v[0], 1, v[1], v[2]); }},
      {"concat",
       [](auto& v) {
         return concat({v[0], v[1]}, 1);
       }},
      {"embedding", [indices](auto& v) { return embedding(indices, v[0]); }},
      {"cross_entropy", [labels](auto& v) { return cross_entropy(v[0], labels, 0.1f); }},
      {"nll_loss", [labels](auto& v) { return nll_loss(log_softmax(v[0], 1), labels); }},
      {"mse_loss", [](auto& v) { return mse_loss(v[0], v[1]); }},
      {"bce_with_logits", [](auto& v) { return binary_cross_entropy_with_logits(v[0], v[1]); }},
  };
}

TEST(Golden, EveryOpMatchesPyTorchForwardAndBackward) {
  const auto fixtures = load("ops.safetensors");
  int checked = 0;
  for (const auto& [name, op] : golden_ops()) {
    SCOPED_TRACE(name);
    std::vector<Tensor> inputs;
    for (int i = 0; fixtures.count(name + ".in" + std::to_string(i)); ++i) {
      Tensor t = fixtures.at(name + ".in" + std::to_string(i)).clone();
      t.set_requires_grad();
      inputs.push_back(t);
    }
    ASSERT_FALSE(inputs.empty()) << "no fixture for " << name;
    const Tensor out = op(inputs);
    expect_close(out, fixtures.at(name + ".out"), 2e-5, name + " output");
    sum(mul(out, fixtures.at(name + ".w"))).backward();
    for (std::size_t i = 0; i < inputs.size(); ++i)
      expect_close(inputs[i].grad(), fixtures.at(name + ".grad" + std::to_string(i)), 2e-5,
                   name + " grad" + std::to_string(i));
    ++checked;
  }
  EXPECT_EQ(checked, 34);
}

nn::NamedTensors weights_of(const std::map<std::string, Tensor>& file, const nn::Module& model) {
  nn::NamedTensors out;
  for (const auto& [name, t] : model.state_dict())
    if (file.count(name)) out.emplace_back(name, file.at(name));
  return out;
}

// gen-golden.py's formula_fill: parameter i, element k, u = sin(12.9898 k + 78.233 i);
// matrices u / sqrt(fan_in), 1-d weights 1 + 0.1 u, 1-d biases 0.1 u.
void formula_fill(nn::Module& model) {
  int i = 0;
  for (auto& [name, p] : model.named_parameters()) {
    float* d = p.data();
    const double fan_in = static_cast<double>(p.numel() / p.size(0));
    const bool weight_1d =
        p.dim() == 1 && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    for (std::int64_t k = 0; k < p.numel(); ++k) {
      const double u = std::sin(12.9898 * static_cast<double>(k) + 78.233 * i);
      d[k] = static_cast<float>(p.dim() > 1 ? u / std::sqrt(fan_in) : weight_1d ? 1 + 0.1 * u : 0.1 * u);
    }
    p.bump_version();
    ++i;
  }
}

void check_model(const std::string& name, nn::Module& model, const std::map<std::string, Tensor>& f,
                 double tol) {
  const Tensor logits = model.forward(f.at("input"));
  expect_close(logits, f.at("logits"), tol, name + " logits");
  cross_entropy(logits, f.at("target")).backward();
  int grads = 0;
  for (const auto& [pname, p] : model.named_parameters()) {
    if (!f.count("grad." + pname)) continue;
    expect_close(p.grad(), f.at("grad." + pname), tol, name + " grad of " + pname);
    ++grads;
  }
  EXPECT_GE(grads, 3) << name;
}

TEST(Golden, ZooModelsMatchPyTorchLogitsAndGradients) {
  for (const char* name : {"simplecnn", "lenet5"}) {
    const auto f = load(std::string("model_") + name + ".safetensors");
    const auto model = nn::make_model(name);
    model->load_state_dict(weights_of(f, *model));  // a PyTorch state dict loads unchanged
    check_model(name, *model, f, 1e-4);
  }
  {
    const auto f = load("model_mlp.safetensors");
    const auto model = nn::make_model("mlp");
    formula_fill(*model);
    check_model("mlp", *model, f, 1e-4);
  }
  {
    const auto f = load("model_resnet18.safetensors");
    const auto model = nn::make_model("resnet18", 10, 3, /*cifar_stem=*/true);
    formula_fill(*model);
    model->eval();  // see gen-golden.py: train-mode BN on a batch of 2 is too ill-conditioned
    check_model("resnet18", *model, f, 1e-4);
  }
}

TEST(Golden, TwentyTrainingStepsFollowPyTorch) {
  const auto batches = load("train_batches.safetensors");
  const Tensor& xs = batches.at("x");
  const Tensor& ys = batches.at("y");
  for (const char* name : {"simplecnn", "lenet5"})
    for (const char* opt_name : {"adam", "sgd"}) {
      SCOPED_TRACE(std::string(name) + " " + opt_name);
      const auto init = load(std::string("model_") + name + ".safetensors");
      const auto ref = load(std::string("train_") + name + "_" + opt_name + ".safetensors");
      const auto model = nn::make_model(name);
      model->load_state_dict(weights_of(init, *model));
      std::unique_ptr<optim::Optimizer> opt;
      if (std::string(opt_name) == "adam")
        opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{});
      else
        opt = std::make_unique<optim::Sgd>(model->parameters(), optim::SgdOptions{0.01f, 0.9f});
      const std::vector<float> losses = ref.at("losses").to_vector();
      for (std::int64_t step = 0; step < xs.size(0); ++step) {
        opt->zero_grad();
        Tensor loss = cross_entropy(model->forward(xs.slice(0, step, step + 1).squeeze(0)),
                                    ys.slice(0, step, step + 1).squeeze(0));
        EXPECT_NEAR(loss.item(), losses[static_cast<std::size_t>(step)],
                    1e-3 * std::max(1.0f, losses[static_cast<std::size_t>(step)]))
            << "step " << step;
        loss.backward();
        opt->step();
      }
      for (const auto& [pname, p] : model->state_dict())
        expect_close(p, ref.at("final." + pname), 1e-3, "final " + pname);
    }
}

}  // namespace
}  // namespace cpudl
