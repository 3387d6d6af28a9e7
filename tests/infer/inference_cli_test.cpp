// `cpudl run` and `cpudl info` end to end on the PyTorch-exported fixtures of tests/onnx/.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_sandbox.h"
#include "cpudl/io.h"

namespace {

using InferenceCli = cpudl::testing::CliSandbox;
const std::string kOnnx = std::string(CPUDL_FIXTURES_DIR) + "/../onnx/";

TEST_F(InferenceCli, RunWritesPyTorchsOutputAsNpy) {
  const auto r = run("run " + kOnnx + "lenet5_opset17.onnx --input " + kOnnx +
                     "lenet5_opset17.input.npy --output " + path("y.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const cpudl::Tensor y = cpudl::io::load_npy(path("y.npy"));
  const cpudl::Tensor expected = cpudl::io::load_npy(kOnnx + "lenet5_opset17.output.npy");
  ASSERT_EQ(y.shape(), expected.shape());
  const auto a = y.to_vector(), b = expected.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4);
}

TEST_F(InferenceCli, BenchReportsMedianAndP90AsJson) {
  const auto r = run("run " + kOnnx + "mobilenet_v2_opset17.onnx --bench 3 --batch 2 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"median_ms", "p90_ms", "batch", "threads"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_GT(j["median_ms"].get<double>(), 0);
  EXPECT_GE(j["p90_ms"].get<double>(), j["median_ms"].get<double>());
  EXPECT_EQ(j["outputs"][0]["shape"], (std::vector<int>{2, 1000}));
}

TEST_F(InferenceCli, InfoDescribesOpsFlopsFusionsAndTheMemoryPlan) {
  const auto r = run("info " + kOnnx + "resnet18_opset13.onnx --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["opset"], 13);
  EXPECT_EQ(j["ops"]["Conv"], 20);
  EXPECT_EQ(j["rewrite_counts"]["folded BatchNormalization"], 20);
  EXPECT_GT(j["flops"].get<double>(), 0.25e9);
  EXPECT_LT(j["arena_bytes"].get<double>(), j["unplanned_bytes"].get<double>());
  const auto text = run("info " + kOnnx + "transformer_opset17.onnx");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("fused GELU x2"), std::string::npos) << text.out;
}

TEST_F(InferenceCli, BadInputsGetOneLineAndTheRightExitCode) {
  // Wrong shape: the input is named, exit 1.
  cpudl::io::save_npy(path("bad.npy"), cpudl::Tensor::zeros({2, 1, 20, 28}));
  auto r = run("run " + kOnnx + "lenet5_opset13.onnx --input " + path("bad.npy"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("input 'input' has shape [2, 1, 20, 28]"), std::string::npos) << r.err;
  // Truncated model file.
  const std::string model = cpudl::testing::slurp(kOnnx + "lenet5_opset13.onnx");
  std::ofstream(path("cut.onnx"), std::ios::binary) << model.substr(0, 1000);
  r = run("run " + path("cut.onnx") + " --input " + kOnnx + "lenet5_opset13.input.npy");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cut.onnx: not a valid ONNX model"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // A .npy that is not one.
  std::ofstream(path("junk.npy")) << "junk";
  r = run("run " + kOnnx + "lenet5_opset13.onnx --input " + path("junk.npy"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("junk.npy: not a .npy file"), std::string::npos) << r.err;
  // Usage errors exit 2: no input, too many inputs, a bad flag value.
  EXPECT_EQ(run("run " + kOnnx + "lenet5_opset13.onnx").exit_code, 2);
  EXPECT_EQ(run("run " + kOnnx + "lenet5_opset13.onnx --input a.npy --input b.npy").exit_code, 2);
  EXPECT_EQ(run("run " + kOnnx + "lenet5_opset13.onnx --bench 0").exit_code, 2);
  // Nothing written when the run fails.
  r = run("run " + kOnnx + "lenet5_opset13.onnx --input " + path("bad.npy") + " --output " +
          path("never.npy"));
  EXPECT_FALSE(std::filesystem::exists(path("never.npy")));
}

}  // namespace
