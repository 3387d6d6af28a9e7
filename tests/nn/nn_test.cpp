// Modules and the model zoo: PyTorch's parameter names and counts, shapes, initialisation,
// state dicts, train/eval switches.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/nn.h"
#include "cpudl/optim.h"
#include "named_tensors.h"

namespace cpudl {
namespace {

using testing::names;

TEST(Nn, ZooParameterNamesAndCountsMatchPyTorch) {
  // Counts and names as torch/torchvision report them for the same definitions.
  const auto simple = nn::make_model("simplecnn");
  EXPECT_EQ(names(simple->state_dict()),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "fc.weight", "fc.bias"}));
  EXPECT_EQ(simple->parameter_count(), 216650);
  EXPECT_EQ(nn::make_model("lenet5")->parameter_count(), 61706);
  EXPECT_EQ(nn::make_model("mlp")->parameter_count(), 1863690);
  const auto resnet = nn::make_model("resnet18", 10, 3, /*cifar_stem=*/false);
  EXPECT_EQ(resnet->parameter_count(), 11181642);  // torchvision.models.resnet18(num_classes=10)
  const auto sd = names(resnet->state_dict());
  EXPECT_EQ(sd.size(), 122u);  // 62 parameters + 60 batch-norm buffers
  EXPECT_EQ(sd[0], "conv1.weight");
  EXPECT_NE(std::find(sd.begin(), sd.end(), "layer2.0.downsample.1.running_var"), sd.end());
  EXPECT_NE(std::find(sd.begin(), sd.end(), "layer4.1.bn2.num_batches_tracked"), sd.end());
  EXPECT_EQ(sd.back(), "fc.bias");
  EXPECT_THROW(nn::make_model("vgg16"), UsageError);
}

TEST(Nn, ZooForwardShapes) {
  Generator g(1);
  for (const char* name : {"simplecnn", "lenet5", "mlp"}) {
    const auto m = nn::make_model(name);
    EXPECT_EQ(m->forward(Tensor::randn({2, 1, 28, 28}, g)).shape(), (Shape{2, 10})) << name;
  }
  const auto r = nn::make_model("resnet18", 10, 3, true);
  EXPECT_EQ(r->forward(Tensor::randn({2, 3, 16, 16}, g)).shape(), (Shape{2, 10}));
  r->eval();
  EXPECT_EQ(r->forward(Tensor::randn({1, 3, 16, 16}, g)).shape(), (Shape{1, 10}));
}

TEST(Nn, DefaultInitialisationBounds) {
  nn::Linear l(400, 10);
  const float bound = 1.0f / 20.0f;
  float lo = 1, hi = -1;
  for (float v : l.weight.to_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.9f * bound);  // it spans the range, not a constant
  EXPECT_GT(hi, 0.9f * bound);
  EXPECT_TRUE(l.weight.requires_grad());
}

TEST(Nn, LoadStateDictReportsEveryProblem) {
  const auto m = nn::make_model("lenet5");
  nn::NamedTensors sd = m->state_dict();
  sd.erase(sd.begin());                                 // conv1.weight missing
  sd.emplace_back("extra.weight", Tensor::zeros({1}));  // unexpected
  sd[0].second = Tensor::zeros({7});                    // conv1.bias mis-shaped
  try {
    m->load_state_dict(sd);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("conv1.bias is f32[7] in the state dict, the model expects f32[6]"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("missing: conv1.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected: extra.weight"), std::string::npos) << msg;
  }
  // A good state dict from another instance makes the outputs equal.
  const auto a = nn::make_model("lenet5"), b = nn::make_model("lenet5");
  b->load_state_dict(a->state_dict());
  Generator g(2);
  const Tensor x = Tensor::randn({3, 1, 28, 28}, g);
  EXPECT_EQ(a->forward(x).to_vector(), b->forward(x).to_vector());
}

TEST(Nn, TrainEvalSwitchesBatchNormAndDropout) {
  nn::Sequential net({std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4),
                      std::make_shared<nn::Dropout>(0.5f)});
  Generator g(3);
  const Tensor x = Tensor::randn({4, 1, 5, 5}, g);
  net.train();
  net.forward(x);
  const auto sd = net.state_dict();
  EXPECT_EQ(names(sd), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                                 "1.running_var", "1.num_batches_tracked"}));
  EXPECT_EQ(sd[6].second.data_as<std::int64_t>()[0], 1);
  net.eval();
  EXPECT_EQ(net.forward(x).to_vector(), net.forward(x).to_vector());  // deterministic in eval
}

}  // namespace
}  // namespace cpudl
