// Modules, the model zoo, optimisers, schedules and safetensors files.
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

namespace cpudl {
namespace {

std::vector<std::string> names(const nn::NamedTensors& t) {
  std::vector<std::string> out;
  for (const auto& [n, v] : t) out.push_back(n);
  return out;
}

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

class Safetensors : public ::testing::Test {
 protected:
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("cpudl_st_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
};

TEST_F(Safetensors, RoundTripKeepsNamesOrderDtypesAndMetadata) {
  const std::vector<std::int32_t> labels = {1, 2, 3};
  const nn::NamedTensors tensors = {{"b.weight", Tensor::arange(0, 6).reshape({2, 3})},
                                    {"a.labels", Tensor::from_buffer(labels.data(), {3}, DType::i32)},
                                    {"scalar", Tensor::scalar(4.5f)}};
  io::save_safetensors(dir / "m.safetensors", tensors, {{"architecture", "lenet5"}});
  const io::SafetensorsFile f = io::load_safetensors(dir / "m.safetensors");
  ASSERT_EQ(names(f.tensors), (std::vector<std::string>{"b.weight", "a.labels", "scalar"}));
  EXPECT_EQ(f.tensors[0].second.to_vector(), tensors[0].second.to_vector());
  EXPECT_EQ(f.tensors[1].second.dtype(), DType::i32);
  EXPECT_EQ(f.tensors[1].second.data_as<std::int32_t>()[2], 3);
  EXPECT_EQ(f.tensors[2].second.dim(), 0);
  EXPECT_EQ(f.metadata.at("architecture"), "lenet5");
  // The header is padded so the data section starts 8-byte aligned.
  std::ifstream in(dir / "m.safetensors", std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

std::string header_file(const std::string& json, std::size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + std::string(data_bytes, '\0');
}

TEST_F(Safetensors, CorruptFilesGiveOneClearError) {
  const struct {
    std::string bytes, expected;
  } cases[] = {
      {"abc", "shorter than the 8-byte header length"},
      {header_file("{}", 0).substr(0, 9), "exceeds the file"},
      {header_file("{not json", 0), "header is not valid JSON"},
      {header_file(R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 2), "unsupported dtype F16"},
      {header_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
       "outside the 4-byte data section"},
      {header_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "8 bytes of data for shape [3]"},
      {header_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "non-integer or negative"},
      {header_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           8),
       "overlap"},
      {header_file(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
       "expected an object with dtype, shape and data_offsets"},
  };
  for (const auto& c : cases) {
    try {
      io::parse_safetensors(c.bytes, "model.safetensors");
      ADD_FAILURE() << "accepted a corrupt file expecting: " << c.expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("model.safetensors: ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(io::load_safetensors(dir / "missing.safetensors"), Error);
}

TEST_F(Safetensors, FailedWriteLeavesThePreviousFileIntact) {
  const auto path = dir / "keep.safetensors";
  io::save_safetensors(path, {{"w", Tensor::ones({2})}});
  const auto before = std::filesystem::file_size(path);
  EXPECT_THROW(io::save_safetensors(path, {{"w", Tensor()}}), Error);  // fails while serialising
  EXPECT_THROW(io::save_safetensors(dir / "no-such-dir" / "x.safetensors", {{"w", Tensor::ones({2})}}),
               Error);
  EXPECT_EQ(std::filesystem::file_size(path), before);
  EXPECT_EQ(io::load_safetensors(path).tensors[0].second.to_vector(), (std::vector<float>{1, 1}));
  for (const auto& entry : std::filesystem::directory_iterator(dir))  // no temporary left behind
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace cpudl
