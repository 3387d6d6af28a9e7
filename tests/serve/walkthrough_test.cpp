// The README's walkthrough, run as written (issue 43): train -> export -> quantize -> serve ->
// curl. Only the data directory (the tiny MNIST set instead of make demo's), the binary's path and
// the port are substituted. The answer curl prints must be what `cpudl run` computes with the
// same quantised file on the same image, normalised as the trained model says.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_sandbox.h"
#include "cpudl/data.h"
#include "cpudl/io.h"
#include "cpudl/ops.h"
#include "serve/server_process.h"
#include "train/trainer.h"

namespace {

using cpudl::testing::slurp;
using Walkthrough = cpudl::testing::CliSandbox;

const std::string kRoot = std::string(CPUDL_FIXTURES_DIR) + "/../..";
const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
    s.replace(at, from.size(), to);
}

TEST_F(Walkthrough, ReadmeCommandsTrainExportQuantizeServeAndClassify) {
  if (std::system("command -v curl >/dev/null 2>&1") != 0) GTEST_SKIP() << "curl is not installed";
  const std::string readme = slurp(kRoot + "/README.md");
  const std::string open = "<!-- walkthrough -->\n```sh\n", close = "```\n<!-- /walkthrough -->";
  const auto begin = readme.find(open), end = readme.find(close);
  ASSERT_NE(begin, std::string::npos) << "README.md has no walkthrough block";
  ASSERT_NE(end, std::string::npos);
  std::string script = readme.substr(begin + open.size(), end - begin - open.size());
  const int port = cpudl::testing::free_port();
  ASSERT_GT(port, 0);
  replace_all(script, "build/cpudl", CPUDL_BINARY);
  replace_all(script, "data/mnist", kTiny);
  replace_all(script, "8080", std::to_string(port));
  // The server goes with the script whatever happens (the block ends with kill %1 itself).
  std::ofstream(path("walkthrough.sh")) << "set -e\ntrap 'kill %1 2>/dev/null || true' EXIT\n" << script;
  const int status =
      std::system(("cd " + dir.string() + " && CPUDL_GOVERNOR=off CPUDL_THREADS=2 timeout 300 bash " +
                   path("walkthrough.sh") + " > out.txt 2> err.txt")
                      .c_str());
  const std::string out = slurp(path("out.txt")), err = slurp(path("err.txt"));
  ASSERT_EQ(WEXITSTATUS(status), 0) << out << err;
  const auto answer_at = out.rfind("{\"model\":\"digits\"");
  ASSERT_NE(answer_at, std::string::npos) << out << err;
  const auto answer = nlohmann::json::parse(out.substr(answer_at, out.find('\n', answer_at) - answer_at));
  ASSERT_EQ(answer["top"].size(), 5u) << answer.dump();

  // The same image through cpudl run and the same file, normalised with the trained model's mean
  // and std: the probabilities the server answered.
  const cpudl::train::ModelFile m = cpudl::train::load_model_file(path("lenet5.safetensors"));
  const cpudl::Tensor x =
      cpudl::train::prepare_image(m, cpudl::data::read_image(path("digit.pgm")), "digit.pgm");
  cpudl::io::save_npy(path("x.npy"), x.unsqueeze(0).contiguous());
  const auto ran =
      run("run " + path("lenet5-int8.onnx") + " --input " + path("x.npy") + " --output " + path("y.npy"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const cpudl::Tensor probs = cpudl::softmax(cpudl::io::load_npy(path("y.npy")), 1);
  std::vector<std::pair<float, int>> ranked;
  for (int k = 0; k < probs.size(1); ++k) ranked.emplace_back(probs.at({0, k}), k);
  std::sort(ranked.begin(), ranked.end(), std::greater<>());
  for (std::size_t k = 0; k < 5; ++k) {
    EXPECT_NEAR(answer["top"][k]["probability"].get<double>(), ranked[k].first, 1e-5) << answer.dump();
    const bool apart = ranked[k].first - ranked[k + 1].first > 1e-4 &&
                       (k == 0 || ranked[k - 1].first - ranked[k].first > 1e-4);
    if (apart) {  // near-ties may come in either order
      EXPECT_EQ(answer["top"][k]["label"], std::to_string(ranked[k].second)) << answer.dump();
    }
  }
  // The first test digit of mnist_tiny, as the IDX file holds it
  const std::string idx = slurp(kTiny + "/t10k-images-idx3-ubyte");
  EXPECT_EQ(slurp(path("digit.pgm")), "P5\n28 28\n255\n" + idx.substr(16, 784));
}

}  // namespace
