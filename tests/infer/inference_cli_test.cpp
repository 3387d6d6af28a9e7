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
  const auto r = run("run " + kOnnx + "mobilenet_v2_opset17.onnx --bench 12 --batch 2 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key :
       {"median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "samples_per_second", "batch", "threads"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_GT(j["min_ms"].get<double>(), 0);
  EXPECT_GE(j["median_ms"].get<double>(), j["min_ms"].get<double>());
  EXPECT_GE(j["p90_ms"].get<double>(), j["median_ms"].get<double>());
  EXPECT_GE(j["p99_ms"].get<double>(), j["p90_ms"].get<double>());
  EXPECT_EQ(j["p99_ms"], j["max_ms"]);  // of 12 runs, the 99th percentile is the slowest
  // Throughput over the timed runs: at most the batch over the fastest run, at least over the slowest.
  EXPECT_LE(j["samples_per_second"].get<double>(), 2 / (j["min_ms"].get<double>() * 1e-3) * 1.0001);
  EXPECT_GE(j["samples_per_second"].get<double>(), 2 / (j["max_ms"].get<double>() * 1e-3) * 0.9);
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

// Every convolution names the algorithm the implementation list (dense/conv/conv_list.h) gave it,
// in `cpudl info` and, once per shape, in CPUDL_VERBOSE's log; CPUDL_CONV_IMPL forces one, and
// the forced reference gives PyTorch's answer too.
TEST_F(InferenceCli, EveryConvolutionNamesItsAlgorithmAndOneCanBeForced) {
  const auto r = run("info " + kOnnx + "resnet18_opset13.onnx --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  int convolutions = 0, winograd = 0;
  for (const auto& n : j["implementations"]) {
    if (n["op"] != "Conv") {
      EXPECT_EQ(n["op"], "MaxPool");  // the pooling list's choice
      continue;
    }
    ++convolutions;
    const std::string impl = n["implementation"];
    EXPECT_TRUE(impl == "winograd" || impl == "onednn") << impl << " for " << n["node"];
    winograd += impl == "winograd";
  }
  EXPECT_EQ(convolutions, 20);
  EXPECT_GT(winograd, 0);  // the blocked stride-1 3x3 layers, weights transformed once
  const auto verbose = run("info " + kOnnx + "resnet18_opset13.onnx", "CPUDL_VERBOSE=1");
  EXPECT_EQ(verbose.err.find("nchw forward"), std::string::npos) << "a planning pass logged: " << verbose.err;
  ASSERT_EQ(verbose.exit_code, 0) << verbose.err;
  EXPECT_NE(verbose.out.find("algorithms:"), std::string::npos) << verbose.out;
  const std::string line =
      "cpudl: conv [1x64x16x16] * [64x64x3x3] stride 1 pad 1 groups 1 blocked forward -> winograd\n";
  const auto at = verbose.err.find(line);
  EXPECT_NE(at, std::string::npos) << verbose.err;
  EXPECT_EQ(verbose.err.find(line, at + 1), std::string::npos) << "logged twice: " << verbose.err;

  const std::string lenet =
      "run " + kOnnx + "lenet5_opset17.onnx --input " + kOnnx + "lenet5_opset17.input.npy";
  const auto forced = run(lenet + " --output " + path("y.npy"), "CPUDL_CONV_IMPL=reference");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  const auto a = cpudl::io::load_npy(path("y.npy")).to_vector();
  const auto b = cpudl::io::load_npy(kOnnx + "lenet5_opset17.output.npy").to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4);
  const auto named = run("info " + kOnnx + "lenet5_opset17.onnx --json", "CPUDL_CONV_IMPL=reference");
  ASSERT_EQ(named.exit_code, 0) << named.err;
  const auto named_json = nlohmann::json::parse(named.out);  // kept: a loop over a temporary's member dangles
  int convolutions_forced = 0;
  for (const auto& n : named_json["implementations"])
    if (n["op"] == "Conv") {
      EXPECT_EQ(n["implementation"], "reference");
      ++convolutions_forced;
    }
  EXPECT_EQ(convolutions_forced, 2);

  const auto unknown = run(lenet, "CPUDL_CONV_IMPL=fastest");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("CPUDL_CONV_IMPL=fastest: no such convolution implementation (planar, "),
            std::string::npos)
      << unknown.err;
  const auto inapplicable = run(lenet, "CPUDL_CONV_IMPL=winograd");  // LeNet-5's kernels are 5x5
  EXPECT_EQ(inapplicable.exit_code, 2);
  EXPECT_NE(inapplicable.err.find("CPUDL_CONV_IMPL=winograd cannot run conv [3x1x28x28] * [6x1x5x5]"),
            std::string::npos)
      << inapplicable.err;
  EXPECT_NE(inapplicable.err.find("; these can: "), std::string::npos) << inapplicable.err;
  EXPECT_EQ(std::count(inapplicable.err.begin(), inapplicable.err.end(), '\n'), 1) << inapplicable.err;
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
  // Other model formats are named by their content, with what takes them, whatever the name.
  const std::string gguf =
      cpudl::testing::slurp(std::string(CPUDL_LLM_FIXTURES_DIR) + "/tiny-llama-q8_0.gguf");
  std::ofstream(path("llm.onnx"), std::ios::binary) << gguf;
  r = run("run " + path("llm.onnx"));  // info describes GGUF files; run takes ONNX only
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("llm.onnx: a GGUF language model (cpudl generate"), std::string::npos) << r.err;
  {
    std::ofstream st(path("model.bin"), std::ios::binary);
    const std::string header = R"({"__metadata__":{}})";
    const std::uint64_t n = header.size();
    st.write(reinterpret_cast<const char*>(&n), sizeof n);
    st << header;
  }
  r = run("run " + path("model.bin") + " --input " + kOnnx + "lenet5_opset13.input.npy");
  EXPECT_EQ(r.exit_code, 1);
  // run takes cpudl models too (through their export): a safetensors file that is not one says so
  EXPECT_NE(r.err.find("model.bin: metadata has no 'architecture' (not a cpudl model file"),
            std::string::npos)
      << r.err;
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
