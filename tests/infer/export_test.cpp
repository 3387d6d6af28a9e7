// `cpudl export`: each zoo architecture's ONNX recipe against the eager model it mirrors (random
// weights and batch-norm statistics, both ResNet stems), through cpudl's ONNX runtime with and
// without its graph rewrites, against ONNX Runtime where it is installed (make bench-onnx puts
// onnxruntime-node in build/bench-onnx) and through the onnx package's checker where Debian's
// python3-onnx is; then the command end to end on a model `cpudl train` wrote.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_sandbox.h"
#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "cpudl/nn.h"
#include "cpudl/ops.h"
#include "infer/onnx_export.h"
#include "train/trainer.h"

namespace {

namespace fs = std::filesystem;
using cpudl::Shape;
using cpudl::Tensor;
using ExportCli = cpudl::testing::CliSandbox;

const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";
const fs::path kOrtModules = fs::path(CPUDL_BINARY).parent_path() / "bench-onnx" / "node_modules";
const std::string kOrtScript = std::string(CPUDL_FIXTURES_DIR) + "/../../bench/ort_time.js";

double relative_difference(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e30;
  double diff = 0, scale = 1e-30;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got.data()[i] - want.data()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want.data()[i])));
  }
  return diff / scale;
}

struct Architecture {
  std::string name;
  Shape input;  // one sample's
};

class ExportRecipe : public ::testing::TestWithParam<Architecture> {};

TEST_P(ExportRecipe, ComputesTheEagerModelInCpudlAndOnnxRuntime) {
  const Architecture& a = GetParam();
  cpudl::default_generator().seed(7);
  const bool cifar_stem = a.input.size() == 3 && a.input[1] <= 64;
  const cpudl::nn::ModulePtr model =
      cpudl::nn::make_model(a.name, 10, a.input[0], cifar_stem, cpudl::shape_numel(a.input));
  // Batch normalisation from statistics far from (0, 1), so a recipe that dropped or misplaced a
  // BatchNormalization (or took the batch's statistics) could not pass.
  cpudl::nn::NamedTensors state = model->state_dict();
  for (auto& [name, t] : state) {
    if (name.ends_with("running_mean"))
      t = cpudl::mul(Tensor::randn(t.shape()), 0.5f);
    else if (name.ends_with("running_var"))
      t = cpudl::add(cpudl::mul(Tensor::rand(t.shape()), 2.0f), 0.5f);
    else if (name.ends_with("bn1.weight") || name.ends_with("bn2.weight") || name.ends_with("1.weight"))
      t = cpudl::add(Tensor::rand(t.shape()), 0.5f);
  }
  model->load_state_dict(state);
  model->eval();
  Shape batch{3};
  batch.insert(batch.end(), a.input.begin(), a.input.end());
  const Tensor x = Tensor::randn(batch);
  Tensor want;
  {
    cpudl::NoGradGuard no_grad;
    want = model->forward(x).contiguous();
  }
  cpudl::infer::ZooModel z{a.name, model->state_dict(), a.input, 10, {{"architecture", a.name}}};
  const std::string file =
      (fs::path(::testing::TempDir()) /
       ("cpudl_export_" + a.name + std::to_string(a.input[1]) + "_" + std::to_string(getpid()) + ".onnx"))
          .string();
  cpudl::io::write_file_atomically(file, cpudl::infer::export_zoo_onnx(z, "test"));
  for (const bool optimize : {true, false}) {
    cpudl::InferenceOptions options;
    options.optimize = optimize;
    cpudl::InferenceSession session(file, options);
    EXPECT_LT(relative_difference(session.run({x}).at(0), want), 1e-4) << a.name << " optimize=" << optimize;
    const cpudl::ModelInfo info = session.info({batch});
    EXPECT_EQ(info.opset, 17);
    ASSERT_EQ(info.inputs.size(), 1u);
    EXPECT_EQ(info.inputs[0].shape[0], -1) << "the batch stays free";
  }
  // The onnx package's full checker (shape inference included), where Debian's python3-onnx is.
  if (std::system("/usr/bin/python3 -c 'import onnx' 2>/dev/null") == 0) {
    EXPECT_EQ(std::system(
                  ("/usr/bin/python3 -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), "
                   "full_check=True)' " +
                   file)
                      .c_str()),
              0);
  }
  if (fs::exists(kOrtModules / "onnxruntime-node")) {
    const std::string in = file + ".x.npy", out = file + ".y.npy";
    cpudl::io::save_npy(in, x);
    ASSERT_EQ(std::system(("NODE_PATH=" + kOrtModules.string() + " node " + kOrtScript + " " + file + " " +
                           in + " 1 1 " + out + " > /dev/null")
                              .c_str()),
              0);
    EXPECT_LT(relative_difference(cpudl::io::load_npy(out), want), 1e-4) << "ONNX Runtime on " << a.name;
    fs::remove(in);
    fs::remove(out);
  } else {
    std::printf(
        "[ INFO ] ONNX Runtime is not installed (%s; make bench-onnx installs it): its comparison skipped\n",
        kOrtModules.c_str());
  }
  fs::remove(file);
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ExportRecipe,
    ::testing::Values(Architecture{"simplecnn", {1, 28, 28}}, Architecture{"lenet5", {1, 28, 28}},
                      Architecture{"mlp", {1, 28, 28}}, Architecture{"resnet18", {3, 32, 32}},
                      Architecture{"resnet18", {3, 72, 72}}),
    [](const auto& info) { return info.param.name + "_" + std::to_string(info.param.input[1]); });

TEST(ExportRecipe, AMissingWeightIsNamed) {
  const cpudl::nn::ModulePtr model = cpudl::nn::make_model("lenet5", 10, 1, false, 0);
  cpudl::nn::NamedTensors state = model->state_dict();
  state.erase(state.begin() + 2);  // conv2.weight
  cpudl::infer::ZooModel z{"lenet5", state, {1, 28, 28}, 10, {}};
  try {
    cpudl::infer::export_zoo_onnx(z, "test");
    FAIL() << "exported a model without conv2.weight";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'conv2.weight'"), std::string::npos) << e.what();
  }
  z = {"vgg", model->state_dict(), {1, 28, 28}, 10, {}};
  EXPECT_THROW(cpudl::infer::export_zoo_onnx(z, "test"), cpudl::Error);
}

// train -> export -> run: the file cpudl run computes what the trained model does, and what
// predict reports; the checkpoint exports the same file; bad outputs are refused before any work.
TEST_F(ExportCli, TrainedModelExportsRunsAndKeepsItsNormalisation) {
  ASSERT_EQ(run("train --model lenet5 --data " + kTiny + " --epochs 1 --batch 64 --keep-checkpoint --out " +
                path("m.safetensors"))
                .exit_code,
            0);
  const auto exported = run("export --json " + path("m.safetensors") + " " + path("m.onnx"));
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const auto report = nlohmann::json::parse(exported.out);
  EXPECT_EQ(report["architecture"], "lenet5");
  EXPECT_EQ(report["opset"], 17);
  EXPECT_LT(report["max_relative_difference"].get<double>(), 1e-4);
  EXPECT_FALSE(fs::exists(path("m.onnx.checking.onnx")));

  const Tensor x = Tensor::randn({4, 1, 28, 28});
  cpudl::io::save_npy(path("x.npy"), x);
  const auto ran = run("run " + path("m.onnx") + " --input " + path("x.npy") + " --output " + path("y.npy"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const cpudl::train::ModelFile m = cpudl::train::load_model_file(path("m.safetensors"));
  Tensor want;
  {
    cpudl::NoGradGuard no_grad;
    want = m.model->forward(x).contiguous();
  }
  EXPECT_LT(relative_difference(cpudl::io::load_npy(path("y.npy")), want), 1e-4);
  const auto info = run("info " + path("m.onnx"));
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("cpudl"), std::string::npos) << info.out;  // the producer

  // eval and predict take the exported file as they take the model (its metadata_props carry the
  // normalisation), and answer the same within float rounding.
  const auto eval_model = run("eval --json --model " + path("m.safetensors") + " --data " + kTiny),
             eval_onnx = run("eval --json --model " + path("m.onnx") + " --data " + kTiny);
  ASSERT_EQ(eval_onnx.exit_code, 0) << eval_onnx.err;
  const auto em = nlohmann::json::parse(eval_model.out), eo = nlohmann::json::parse(eval_onnx.out);
  EXPECT_EQ(eo["samples"], em["samples"]);
  EXPECT_NEAR(eo["loss"].get<double>(), em["loss"].get<double>(), 1e-5);
  EXPECT_NEAR(eo["accuracy"].get<double>(), em["accuracy"].get<double>(), 1.5 / em["samples"].get<double>());
  const std::string digit = " idx:" + kTiny + "/t10k-images-idx3-ubyte:3";
  const auto pm = nlohmann::json::parse(
                 run("predict --json --top 10 --model " + path("m.safetensors") + digit).out),
             po = nlohmann::json::parse(run("predict --json --top 10 --model " + path("m.onnx") + digit).out);
  ASSERT_EQ(po[0]["top"].size(), 10u);
  for (std::size_t k = 0; k < 10; ++k) {
    const auto cls = po[0]["top"][k]["class"].get<int>();
    for (const auto& entry : pm[0]["top"]) {
      if (entry["class"] == cls) {
        EXPECT_NEAR(po[0]["top"][k]["probability"].get<double>(), entry["probability"].get<double>(), 1e-5);
      }
    }
  }
  const std::string foreign = std::string(CPUDL_FIXTURES_DIR) + "/../onnx/lenet5_opset17.onnx";  // PyTorch's
  const auto refused = run("predict --model " + foreign + digit);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("does not say how its inputs are normalised"), std::string::npos) << refused.err;

  // run, info and quantize take the cpudl model itself, through its export: a temporary file in
  // TMPDIR (a private one here, as ctest runs other tests that export an m.safetensors at once).
  std::filesystem::create_directories(path("tmp"));
  const std::string private_tmp = "TMPDIR=" + path("tmp");
  const auto direct =
      run("run " + path("m.safetensors") + " --input " + path("x.npy") + " --output " + path("z.npy"),
          private_tmp);
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  EXPECT_EQ(relative_difference(cpudl::io::load_npy(path("z.npy")), cpudl::io::load_npy(path("y.npy"))), 0.0);
  const auto described = run("info " + path("m.safetensors"), private_tmp);
  EXPECT_EQ(described.exit_code, 0) << described.err;
  EXPECT_NE(described.err.find("is a cpudl model: described as its ONNX export"), std::string::npos)
      << described.err;
  EXPECT_NE(described.out.find("input f32 [?, 1, 28, 28]"), std::string::npos) << described.out;
  const auto quantized =
      run("quantize " + path("m.safetensors") + " " + path("q.onnx") + " --mode dynamic --json", private_tmp);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  EXPECT_EQ(nlohmann::json::parse(quantized.out)["input"], path("m.safetensors"));
  EXPECT_EQ(run("run " + path("q.onnx") + " --input " + path("x.npy")).exit_code, 0);
  for (const auto& e : fs::directory_iterator(path("tmp")))  // cpudl-export-PID-m.onnx
    ADD_FAILURE() << "left behind: " << e.path().filename().string();

  // The run ended at the checkpoint's step: the checkpoint exports the same graph and weights.
  ASSERT_EQ(run("export " + path("m.safetensors.ckpt") + " " + path("c.onnx")).exit_code, 0);
  EXPECT_EQ(cpudl::testing::slurp(path("c.onnx")), cpudl::testing::slurp(path("m.onnx")));

  std::ofstream(path("keep.onnx")) << "previous";
  for (const auto& [args, code, expected] : std::vector<std::tuple<std::string, int, std::string>>{
           {"export " + path("m.safetensors") + " " + path("m.safetensors"), 2,
            "is the same file as the input"},
           {"export " + path("m.safetensors") + " " + dir.string(), 2, "is a directory"},
           {"export " + path("m.onnx") + " " + path("keep.onnx"), 1, "an ONNX model (cpudl run"},
           {"export " + path("missing.safetensors") + " " + path("keep.onnx"), 1, "cannot open"},
           {"export " + path("m.safetensors"), 2, "missing OUTPUT"},
       }) {
    const auto r = run(args);
    EXPECT_EQ(r.exit_code, code) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_EQ(cpudl::testing::slurp(path("keep.onnx")), "previous");
}

// quantize --calib DATA_DIR for a cpudl model: the training split calibrates, the test split and
// its labels make the report, whose float and int8 accuracies are what eval says of the float
// model and of the quantised file.
TEST_F(ExportCli, QuantizeCalibratesOnADatasetAndReportsHeldOutAccuracy) {
  ASSERT_EQ(
      run("train --model lenet5 --data " + kTiny + " --epochs 2 --batch 32 --out " + path("m.safetensors"))
          .exit_code,
      0);
  const auto q = run("quantize " + path("m.safetensors") + " " + path("q.onnx") +
                     " --mode static --calib-samples 40 --json --calib " + kTiny);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const auto report = nlohmann::json::parse(q.out);
  EXPECT_EQ(report["inputs"], "dataset");
  const auto float_eval = run("eval --json --model " + path("m.safetensors") + " --data " + kTiny),
             int8_eval = run("eval --json --model " + path("q.onnx") + " --data " + kTiny);
  ASSERT_EQ(int8_eval.exit_code, 0) << int8_eval.err;
  const auto fe = nlohmann::json::parse(float_eval.out), ie = nlohmann::json::parse(int8_eval.out);
  EXPECT_EQ(report["samples"], fe["samples"]);  // the whole test split
  EXPECT_DOUBLE_EQ(report["fp32_accuracy"].get<double>(), fe["accuracy"].get<double>());
  EXPECT_DOUBLE_EQ(report["int8_accuracy"].get<double>(), ie["accuracy"].get<double>());
  const auto text = run("quantize " + path("m.safetensors") + " " + path("q2.onnx") +
                        " --mode static --calib-samples 40 --calib " + kTiny);
  EXPECT_NE(text.out.find("calibrated (minmax observer) on 40 samples of " + kTiny + "'s training split"),
            std::string::npos)
      << text.out;
  // bench model times the float file on the eager engine and the int8 file on the ONNX runtime; the
  // two count the same multiply-adds (the eager op counter vs the ONNX plan's count).
  const auto bench_float = run("bench model --json --steps 2 --batch 8 --model " + path("m.safetensors")),
             bench_int8 = run("bench model --json --steps 2 --batch 8 --model " + path("q.onnx"));
  ASSERT_EQ(bench_int8.exit_code, 0) << bench_int8.err;
  ASSERT_EQ(bench_float.exit_code, 0) << bench_float.err;
  const auto bf = nlohmann::json::parse(bench_float.out), bi = nlohmann::json::parse(bench_int8.out);
  EXPECT_EQ(bf["engine"], "eager engine");
  EXPECT_EQ(bi["engine"], "ONNX runtime");
  EXPECT_EQ(bi["input_shape"], nlohmann::json::parse("[8, 1, 28, 28]"));
  EXPECT_GT(bi["images_per_second"].get<double>(), 0);
  EXPECT_NEAR(bi["gflop_per_step"].get<double>(), bf["gflop_per_step"].get<double>(),
              0.02 * bf["gflop_per_step"].get<double>());
  EXPECT_EQ(run("bench model --train --model " + path("q.onnx")).exit_code, 2);

  // A dataset makes its own report: .npy report inputs beside it are a usage error.
  const auto both = run("quantize " + path("m.safetensors") + " " + path("q3.onnx") +
                        " --mode static --calib " + kTiny + " --labels " + path("l.npy"));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("is a dataset"), std::string::npos) << both.err;
  EXPECT_FALSE(fs::exists(path("q3.onnx")));
}

}  // namespace
